#!/usr/bin/python3
"""A legacy HTTP/1.0 service that reads request bodies by Content-Length only.

Usage: /usr/bin/python3 http10server.py [--host 127.0.0.1] [--port 0]
Prints "READY <port>" on stdout (flushed) once listening, then "CONN" for every
connection accepted and "REQ <method> <path> <body length>" for every request answered.

Python's http.server speaking HTTP/1.0, as old SOAP servers do: it knows nothing of
chunked transfer coding. A POST with Transfer-Encoding, or without Content-Length, gets
411 Length Required (and the connection closes, as after every HTTP/1.0 response).
Otherwise the answer is 200 with a JSON document describing the request exactly as
received: the request line's version, the header fields in order with their casing, and
the body (base64), so a test can compare them with what the client sent.
"""
import argparse
import base64
import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def setup(self):
        super().setup()
        print("CONN", flush=True)

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        if self.headers.get("Transfer-Encoding") is not None or self.headers.get("Content-Length") is None:
            body = b"Length Required: this HTTP/1.0 server reads bodies by Content-Length only\n"
            self.send_response(411)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            print("REQ POST %s refused" % self.path, flush=True)
            return
        body = self.rfile.read(int(self.headers["Content-Length"]))
        doc = json.dumps({
            "version": self.request_version,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": base64.b64encode(body).decode("ascii"),
        }).encode("ascii")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(doc)))
        self.end_headers()
        self.wfile.write(doc)
        print("REQ POST %s %d" % (self.path, len(body)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    srv = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    print("READY %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
