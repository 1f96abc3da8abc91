#!/usr/bin/python3
"""A tiny Alertmanager webhook receiver: records every POST as one JSON line.

Each line: {"received": <unix seconds>, "path": "/alerts", "payload": <the webhook JSON>}.
Used by the fire drill (fire_drill.py) and by scripts/demo to show what a pager would get.

Usage: webhook_receiver.py --port PORT --out FILE [--address 127.0.0.1] [--print]
Prints "listening on ADDRESS:PORT" once ready (port 0: a free port, printed). Standard library only.
"""

import argparse
import http.server
import json
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", required=True, help="JSON lines file to append to")
    ap.add_argument("--print", action="store_true", help="also print one line per alert")
    args = ap.parse_args()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            received = time.time()
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, 16 << 20))
            try:
                payload = json.loads(body)
            except ValueError:
                payload = {"unparsed": body.decode("utf-8", "replace")}
            line = json.dumps({"received": received, "path": self.path, "payload": payload})
            with lock, open(args.out, "a") as f:
                f.write(line + "\n")
            if args.print and isinstance(payload, dict):
                for a in payload.get("alerts", []):
                    lab = a.get("labels", {})
                    print(f"{time.strftime('%H:%M:%S')} {a.get('status', '?'):8} "
                          f"{lab.get('alertname')} {lab.get('role', '')}:{lab.get('task', '')} "
                          f"{a.get('annotations', {}).get('summary', '')}", flush=True)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"trainscope webhook receiver\n")

        def log_message(self, *unused):
            pass

    server = http.server.ThreadingHTTPServer((args.address, args.port), Handler)
    print(f"listening on {args.address}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
