#!/usr/bin/env python3
"""Records the AdmissionReviews an apiserver sends to a webhook, passing each on.

    bench/review-recorder.py --listen 127.0.0.1:PORT --upstream https://127.0.0.1:WPORT \
        --cert TLS.pem --key TLS.key --ca CA.pem --out reviews.jsonl [--max 20000]

An HTTPS server on 127.0.0.1 that the webhook configuration points at instead of the
webhook: each POST is forwarded to the same path of --upstream (verified with --ca), the
webhook's answer returned unchanged, and one JSON line appended to --out:
{"path", "at": Unix seconds, "review": the AdmissionReview sent, "response": the one
answered, "seconds": the webhook's time}.
At most --max lines are written (later reviews are still forwarded). The reviews it
writes are what `cargo test -p karmada-quota-webhook captured_reviews` replays through the
chart's matchConditions (KQ_CAPTURED_REVIEWS). It adds a hop of its own: a run with it is
a record of what was sent, not a timing.
"""

import argparse
import http.client
import http.server
import json
import ssl
import sys
import threading
import time
import urllib.parse


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max", type=int, default=20000)
    args = p.parse_args()
    host, port = args.listen.rsplit(":", 1)
    if host != "127.0.0.1":
        sys.exit("review-recorder: listens on 127.0.0.1 only")
    up = urllib.parse.urlsplit(args.upstream)
    client_ctx = ssl.create_default_context(cafile=args.ca)
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8")
    written = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            at, t0 = time.time(), time.monotonic()
            conn = http.client.HTTPSConnection(up.hostname, up.port, context=client_ctx, timeout=10)
            try:
                conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                answer, status = r.read(), r.status
            finally:
                conn.close()
            seconds = time.monotonic() - t0
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            try:
                line = json.dumps({"path": self.path, "at": round(at, 3), "review": json.loads(body),
                                   "response": json.loads(answer), "seconds": round(seconds, 6)})
            except ValueError:
                return
            with lock:
                if written[0] < args.max:
                    out.write(line + "\n")
                    out.flush()
                    written[0] += 1

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer((host, int(port)), Handler)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(args.cert, args.key)
    server.socket = server_ctx.wrap_socket(server.socket, server_side=True)
    print(f"review-recorder: {args.listen} -> {args.upstream}, writing {args.out}", file=sys.stderr)
    server.serve_forever()


if __name__ == "__main__":
    main()
