#!/usr/bin/env python3
"""A GCE metadata server for one connection on stdin/stdout.

QEMU's user network runs it for every guest connection to the metadata
address (guestfwd=tcp:169.254.169.254:80-cmd:...), so the podVM reaches it
as a GCE VM reaches the real one. It serves the instance attributes given as
NAME=FILE arguments, and keeps the rules of GCE's metadata server that a
client meets (cloud.google.com/compute/docs/metadata/querying-metadata):
requests need the header "Metadata-Flavor: Google" and must not carry
X-Forwarded-For (403 otherwise), responses carry "Metadata-Flavor: Google",
and attribute values are returned as stored (CAA's GCP providers store
user-data base64-encoded; process-user-data decodes it).

It also serves instance/maintenance-event and instance/preempted, the
notices GCE gives before it stops a VM (compute/docs/metadata/
getting-live-migration-notice, compute/docs/instances/create-use-spot):
NONE and FALSE, or the values in GCE_METADATA_MAINTENANCE_EVENT and
GCE_METADATA_PREEMPTED. Answers carry an ETag, and wait_for_change=true
with the current last_etag hangs until timeout_sec passes or the guest
closes the connection (the values do not change during a boot here).

Each request is appended to the log file named by GCE_METADATA_LOG.
"""
import hashlib
import os
import select
import sys
import urllib.parse

PREFIX = "/computeMetadata/v1/instance"


def main():
    attrs = {}
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        with open(path, "rb") as f:
            attrs[name] = f.read()
    rin, wout = sys.stdin.buffer, sys.stdout.buffer
    log = os.environ.get("GCE_METADATA_LOG")
    while True:
        line = rin.readline()
        if not line:
            return
        try:
            method, target, _ = line.decode("latin-1").split(" ", 2)
        except ValueError:
            return
        headers = {}
        while True:
            h = rin.readline()
            if not h or h in (b"\r\n", b"\n"):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        path, _, query = target.partition("?")
        status, body = route(method, path, headers, attrs)
        etag = hashlib.sha256(body).hexdigest()[:16]
        q = urllib.parse.parse_qs(query)
        if status == 200 and q.get("wait_for_change") == ["true"] and q.get("last_etag") == [etag]:
            # Nothing changes here: hang until timeout_sec, or until the
            # guest closes the connection (QEMU then closes stdin).
            timeout = float(q.get("timeout_sec", ["300"])[0])
            ready, _, _ = select.select([rin], [], [], timeout)
            if ready and not rin.peek(1):
                return
        if log:
            with open(log, "a") as f:
                f.write(f"{method} {target} {status}\n")
        reason = {200: "OK", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed"}[status]
        wout.write(f"HTTP/1.1 {status} {reason}\r\nMetadata-Flavor: Google\r\nETag: {etag}\r\n"
                   f"Content-Type: application/text\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        wout.write(body)
        wout.flush()
        if headers.get("connection", "").lower() == "close":
            return


def route(method, path, headers, attrs):
    if headers.get("metadata-flavor") != "Google" or "x-forwarded-for" in headers:
        return 403, b"Missing Metadata-Flavor:Google header.\n"
    if method != "GET":
        return 405, b""
    if path in (PREFIX, PREFIX + "/"):
        return 200, b"attributes/\nmaintenance-event\npreempted\n"
    if path == PREFIX + "/maintenance-event":
        return 200, os.environ.get("GCE_METADATA_MAINTENANCE_EVENT", "NONE").encode()
    if path == PREFIX + "/preempted":
        return 200, os.environ.get("GCE_METADATA_PREEMPTED", "FALSE").encode()
    if path == PREFIX + "/attributes/":
        return 200, "".join(n + "\n" for n in sorted(attrs)).encode()
    name = path[len(PREFIX + "/attributes/"):] if path.startswith(PREFIX + "/attributes/") else None
    if name in attrs:
        return 200, attrs[name]
    return 404, b"Not Found\n"


if __name__ == "__main__":
    main()
