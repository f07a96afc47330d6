#!/usr/bin/env python3
"""Helpers for test/startup/pull-bench.sh (standard library only).

  pull_bench.py image DIR MIB LAYERS
      Writes an OCI image layout to DIR: LAYERS layers of incompressible
      random bytes, MIB MiB in all, each a gzip-compressed tar (as a registry
      image usually is), plus its config and manifest.

  pull_bench.py delay TUN_A TUN_B DELAY_MS
      A packet delay line between two persistent tun devices (created with
      `ip tuntap add ... mode tun vnet_hdr`): every packet read from one is
      written to the other DELAY_MS later, in both directions. It stands in
      for netem where the kernel has no sch_netem. The devices carry the
      kernel's offload header (IFF_VNET_HDR with TSO), so TCP's 64 KiB GSO
      packets cross whole and a Python loop keeps up with a gigabit.

  pull_bench.py evict DIR
      Drops every file under DIR from the page cache (fsync, then
      posix_fadvise DONTNEED), so that the next read comes from the disk;
      prints the bytes evicted.

  pull_bench.py tried LOG MIRROR REGISTRY
      The locations a `skopeo --debug` pull tried, in order, and why each
      that failed did (containers/image's "Trying to access" and "Accessing
      ... failed" lines), as one JSON line; exits 1 unless it tried MIRROR
      first, which failed, and then REGISTRY (host:port each).

  pull_bench.py summary FILE
      Reads the cache bench's JSON lines (one per pull: case, bytes,
      seconds) and prints one JSON line: each case's MB/s (10^6 bytes over
      its pulls' summed seconds, with the slowest and fastest pull) and the
      ratio of each case's MB/s to the "nat" case's.
"""

import collections
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import select
import signal
import struct
import sys
import tarfile
import time


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class HashingWriter(io.RawIOBase):
    """Counts and hashes what passes through to an underlying file."""

    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def writable(self):
        return True

    def write(self, b):
        self.h.update(b)
        self.n += len(b)
        return self.f.write(b)


class RandomReader(io.RawIOBase):
    def __init__(self, n):
        self.left = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.left, 4 << 20)
        if k <= 0:
            return 0
        b[:k] = os.urandom(k)
        self.left -= k
        return k


def write_blob(blobs, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, d), "wb") as f:
        f.write(data)
    return d


def image(out, mib, layers):
    blobs = os.path.join(out, "blobs", "sha256")
    os.makedirs(blobs, exist_ok=True)
    total = mib << 20
    per = [total // layers + (1 if i < total % layers else 0) for i in range(layers)]
    descs, diff_ids = [], []
    for i, size in enumerate(per):
        tmp = os.path.join(blobs, "layer.tmp")
        with open(tmp, "wb") as raw:
            comp = HashingWriter(raw)
            # gzip level 0: random bytes do not compress at any level, so
            # deflate stores them at every level; level 0 stores them
            # without trying, ten times faster than level 1.
            with gzip.GzipFile(fileobj=comp, mode="wb", compresslevel=0, mtime=0) as gz:
                diff = HashingWriter(gz)
                with tarfile.open(fileobj=diff, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    ti = tarfile.TarInfo(f"bench/layer{i}.bin")
                    ti.size, ti.mode, ti.mtime = size, 0o644, 0
                    tar.addfile(ti, io.BufferedReader(RandomReader(size), 4 << 20))
        digest = comp.h.hexdigest()
        os.rename(tmp, os.path.join(blobs, digest))
        descs.append({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": "sha256:" + digest,
            "size": comp.n,
        })
        diff_ids.append("sha256:" + diff.h.hexdigest())
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }, sort_keys=True).encode()
    cd = write_blob(blobs, config)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": "sha256:" + cd, "size": len(config)},
        "layers": descs,
    }, sort_keys=True).encode()
    md = write_blob(blobs, manifest)
    with open(os.path.join(out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": "sha256:" + md, "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": "latest"},
        }]}, f)
    print(json.dumps({"layers": len(descs), "bytes": sum(d["size"] for d in descs)}))


TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TUN, IFF_NO_PI, IFF_VNET_HDR = 0x0001, 0x1000, 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR))
    fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
    return fd


def delay(tun_a, tun_b, delay_ms):
    d = float(delay_ms) / 1000.0
    a, b = open_tun(tun_a), open_tun(tun_b)
    peer = {a: b, b: a}
    queue = {a: collections.deque(), b: collections.deque()}  # packets read from fd, due times ascending
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    while True:
        now = time.monotonic()
        for src, q in queue.items():
            while q and q[0][0] <= now:
                _, pkt = q.popleft()
                try:
                    os.write(peer[src], pkt)
                except BlockingIOError:
                    pass  # the kernel's backlog is full: a drop, as on a wire
        due = [q[0][0] for q in queue.values() if q]
        timeout = max(0.0, min(due) - time.monotonic()) if due else 1.0
        ready, _, _ = select.select([a, b], [], [], timeout)
        now = time.monotonic()
        for fd in ready:
            for _ in range(64):
                try:
                    pkt = os.read(fd, 262144)
                except BlockingIOError:
                    break
                queue[fd].append((now + d, pkt))


def evict(d):
    n = 0
    for root, _, files in os.walk(d):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)  # dirty pages are not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += os.fstat(fd).st_size
            finally:
                os.close(fd)
    print(json.dumps({"evicted_bytes": n}))


def tried(log, mirror, registry):
    trying = re.compile(r'Trying to access \\?"([^"\\]+)')
    failed = re.compile(r'Accessing \\?"([^"\\]+)\\?" failed: (.*?)"?$')
    out = []
    with open(log, errors="replace") as f:
        for line in f:
            m = trying.search(line)
            if m:
                out.append({"location": m.group(1)})
                continue
            m = failed.search(line)
            if m and out and out[-1]["location"] == m.group(1):
                out[-1]["failed"] = m.group(2).replace('\\"', '"')
    hosts = [t["location"].split("/")[0] for t in out]
    ok = hosts[:2] == [mirror, registry] and "failed" in out[0] and "failed" not in out[1]
    print(json.dumps({"case": "fallback-path", "tried": out, "mirror_then_registry": ok}))
    return ok


def summary(path):
    cases = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            cases.setdefault(r["case"], []).append(r)
    out = {"case": "summary"}
    rate = {}
    for c, rs in cases.items():
        b, s = sum(r["bytes"] for r in rs), sum(r["seconds"] for r in rs)
        each = [r["bytes"] / r["seconds"] / 1e6 for r in rs]
        rate[c] = b / s / 1e6
        out[c] = {"pulls": len(rs), "mb_s": round(rate[c], 1),
                  "slowest_mb_s": round(min(each), 1), "fastest_mb_s": round(max(each), 1)}
    if rate.get("nat"):
        out["ratio_to_nat"] = {c: round(r / rate["nat"], 2) for c, r in rate.items() if c != "nat"}
    print(json.dumps(out))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "image" and len(sys.argv) == 5:
        image(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) >= 2 and sys.argv[1] == "delay" and len(sys.argv) == 5:
        delay(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] in ("evict", "summary"):
        {"evict": evict, "summary": summary}[sys.argv[1]](sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "tried":
        sys.exit(0 if tried(sys.argv[2], sys.argv[3], sys.argv[4]) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
