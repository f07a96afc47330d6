#!/usr/bin/env python3
"""A stand-in OCI registry that cuts a blob download off midway.

It serves one artefact shaped as `oras push` makes kata's (a manifest, an
empty config, one layer) under any repository and tag, answers the
manifest and config whole, and for the layer sends the headers with the
full Content-Length, half the bytes, then closes the connection: a fetch
through Cloud NAT that dropped. Loopback only; the port it bound is
written to the file named by its first argument. Test use only
(test/podvm/podvm-binaries-test.sh).
"""
import hashlib
import http.server
import json
import os
import sys

LAYER = bytes(range(256)) * 64
CONFIG = b"{}"


def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


MANIFEST = json.dumps({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "artifactType": "application/vnd.unknown.artifact.v1",
    "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(CONFIG), "size": len(CONFIG)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": digest(LAYER), "size": len(LAYER),
                "annotations": {"org.opencontainers.image.title": "kata-static-agent.tar.zst"}}],
}).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, body, ctype, whole=True):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Docker-Content-Digest", digest(body))
        self.end_headers()
        if self.command == "HEAD":
            return
        if whole:
            self.wfile.write(body)
        else:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True

    def route(self):
        p = self.path
        if p in ("/v2/", "/v2"):
            return self.send(b"{}", "application/json")
        if "/manifests/" in p:
            return self.send(MANIFEST, "application/vnd.oci.image.manifest.v1+json")
        if p.endswith("/blobs/" + digest(CONFIG)):
            return self.send(CONFIG, "application/vnd.oci.empty.v1+json")
        if p.endswith("/blobs/" + digest(LAYER)):
            return self.send(LAYER, "application/octet-stream", whole=False)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = route
    do_HEAD = route


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    # Renamed once written, so a reader never sees a partial port.
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever()


if __name__ == "__main__":
    main()
