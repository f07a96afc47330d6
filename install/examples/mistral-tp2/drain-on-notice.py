"""Drain this pod's Ray node when GCE gives notice that its podVM is going.

Runs as a sidecar beside the Ray container of a worker pod on a caa-gcp-t4
podVM. The podVM watches its own metadata server (a container in a peer pod
cannot reach it) and serves what it saw at http://127.0.0.1:8007/v1/notice;
GET ?wait=true hangs until the notice says to drain. On a preemption
(about 30 s before hard off) or a host maintenance stop (about 60 s; a VM
with a GPU cannot live-migrate) this asks Ray's GCS to drain the node, as
Ray's own guide to preemption tells a self-managed cluster to do:
`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION` with the seconds
left, so Ray schedules nothing new there and records why the node goes.

Python standard library and the `ray` CLI of the pod's own image only.
Exit status 2 is bad arguments; otherwise it runs until the pod stops.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

DRAIN_REASON = "DRAIN_NODE_REASON_PREEMPTION"
# The server answers a hanging GET within its --max-wait (5 min); the client
# gives it a minute more before it takes the connection for dead.
WAIT_TIMEOUT_SECONDS = 360
MAX_RETRY_SECONDS = 30


def log(msg):
    print(f"drain-on-notice: {msg}", flush=True)


def wait_for_drain(url, sleep=time.sleep):
    """Long-poll the podVM's notice until it says to drain; return it."""
    delay, told = 1.0, False
    while True:
        try:
            with urllib.request.urlopen(url + "?wait=true", timeout=WAIT_TIMEOUT_SECONDS) as r:
                notice = json.load(r)
            delay, told = 1.0, False
            if notice.get("drain"):
                return notice
            continue
        except (urllib.error.URLError, OSError, ValueError) as e:
            # Not yet listening (the podVM starts it before the containers,
            # so this is a pod on a node without it, or a restart): say so
            # once per outage, keep trying.
            if not told:
                log(f"no notice at {url} ({e}); is this pod on a caa-gcp-t4 podVM? retrying")
                told = True
        sleep(delay)
        delay = min(delay * 2, MAX_RETRY_SECONDS)


def node_id_for(ray, dashboard, node_ip):
    """This pod's Ray node: the ALIVE node whose IP is the pod's."""
    out = subprocess.run(
        [ray, "list", "nodes", "--address", dashboard,
         "--filter", f"node_ip={node_ip}", "--filter", "state=ALIVE", "--format", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    nodes = json.loads(out)
    if len(nodes) != 1:
        raise RuntimeError(f"{len(nodes)} ALIVE Ray nodes have IP {node_ip}, want 1")
    return nodes[0]["node_id"]


def drain(ray, gcs, node_id, notice, margin):
    """Tell the GCS the node goes, leaving margin seconds before hard off."""
    seconds = max(int(notice.get("remainingSeconds", 0)) - margin, 0)
    message = (f"caa-gcp-t4 podVM notice: {notice.get('event')} ({notice.get('source')}), "
               f"GCE stops this VM at about {notice.get('deadline')}")
    subprocess.run(
        [ray, "drain-node", f"--address={gcs}", f"--node-id={node_id}",
         f"--reason={DRAIN_REASON}", f"--reason-message={message}",
         f"--deadline-remaining-seconds={seconds}"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--notice", default="http://127.0.0.1:8007/v1/notice",
                   help="the podVM's notice endpoint")
    p.add_argument("--gcs", required=True, help="Ray GCS address, host:6379")
    p.add_argument("--dashboard", required=True, help="Ray dashboard, http://host:8265")
    p.add_argument("--node-ip", default=os.environ.get("POD_IP", ""),
                   help="this pod's IP, Ray's node IP (default $POD_IP)")
    p.add_argument("--margin", type=int, default=5,
                   help="seconds kept between Ray's drain deadline and GCE's hard off")
    p.add_argument("--ray", default="ray", help="the ray CLI")
    a = p.parse_args(argv)
    if not a.node_ip:
        p.error("--node-ip: empty; set POD_IP from the pod's status.podIP (fieldRef)")
    if a.margin < 0:
        p.error(f"--margin: {a.margin} is negative; give seconds, 0 or more")

    # The pod's stop signal ends the sidecar at once; nothing to hand over.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log(f"watching {a.notice} for node {a.node_ip}")
    notice = wait_for_drain(a.notice)
    log(f"notice: {notice.get('event')} ({notice.get('source')}), "
        f"{notice.get('remainingSeconds')} s left")
    try:
        node_id = node_id_for(a.ray, a.dashboard, a.node_ip)
        seconds = drain(a.ray, a.gcs, node_id, notice, a.margin)
        log(f"asked Ray to drain node {node_id} within {seconds} s")
    except (subprocess.SubprocessError, RuntimeError, ValueError, KeyError, OSError) as e:
        detail = getattr(e, "stderr", "") or ""
        log(f"drain failed: {e} {detail.strip()}")
    # Stay up: a sidecar that exits is restarted and would drain again.
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
