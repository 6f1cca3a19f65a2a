#!/usr/bin/python3
"""spyne SOAP 1.1 (document/literal) test service for the soapgw e2e tests.

Usage: /usr/bin/python3 server.py [--host 127.0.0.1] [--port 0]
Prints exactly one line "READY <port>" on stdout (flushed) once listening.
Endpoint: http://HOST:PORT/  (WSDL: GET http://HOST:PORT/?wsdl)
"""
import argparse
import datetime
import io
import logging
import socketserver
import sys
from xml.sax.saxutils import escape as xml_escape
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from spyne import Application, Array, ComplexModel, DateTime, Fault, Integer, ServiceBase, Unicode, rpc
from spyne.protocol.soap import Soap11
from spyne.server.wsgi import WsgiApplication

TNS = "urn:soapgw:e2e"
EPOCH = datetime.datetime(2024, 1, 1, 8, 0, 0, tzinfo=datetime.timezone.utc)
MAX_ENTRIES = 5000


class Entry(ComplexModel):
    __namespace__ = TNS
    slot = Integer
    start = DateTime
    subject = Unicode


class E2EService(ServiceBase):
    @rpc(Unicode, _returns=Unicode)
    def echo(ctx, text):
        return text

    @rpc(Integer, Integer, _returns=Integer)
    def add(ctx, a, b):
        return a + b

    @rpc(Integer, _returns=Array(Entry))
    def calendar_entries(ctx, count):
        if count is None or count < 0 or count > MAX_ENTRIES:
            raise Fault(faultcode="Client.BadCount", faultstring="count must be 0..%d" % MAX_ENTRIES)
        return [
            Entry(slot=i,
                  start=EPOCH + datetime.timedelta(minutes=30 * i),
                  subject="Termin %d – Besprechung/会議 #%d" % (i, i))
            for i in range(count)
        ]

    @rpc(Unicode)
    def fail(ctx, reason):
        raise Fault(faultcode="Client.Rejected", faultstring=reason)


class PerHostWsdlApplication(WsgiApplication):
    """Stock spyne builds the WSDL once, from the URL (Host header) of the
    *first* ?wsdl request, and caches it forever, so soap:address would depend
    on who asked first (direct vs. through the gateway).  Spyne's Wsdl11 object
    cannot be rebuilt in place (it keeps state), so build it once with a
    placeholder address and substitute the current request's URL
    (wsgi.url_scheme + Host header + path) on every ?wsdl GET."""

    PLACEHOLDER = "http://soapgw-e2e.invalid/"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.doc.wsdl11.build_interface_document(self.PLACEHOLDER)
        self._wsdl_template = self.doc.wsdl11.get_interface_document()
        assert self._wsdl_template.count(self.PLACEHOLDER.encode()) == 1

    def handle_wsdl_request(self, req_env, start_response, url):
        loc = xml_escape(url, {'"': "&quot;"}).encode("utf-8")
        body = self._wsdl_template.replace(self.PLACEHOLDER.encode(), loc)
        start_response("200 OK", [("Content-Type", "text/xml; charset=utf-8"),
                                  ("Content-Length", str(len(body)))])
        return [body]


def dechunk_middleware(app):
    """wsgiref does not decode chunked request bodies (spyne then fails with a
    plain-text 500).  Opt-in (--accept-chunked): decode them here."""
    def wrapped(environ, start_response):
        if environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked":
            rfile, body = environ["wsgi.input"], bytearray()
            while True:
                size = int(rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                body += rfile.read(size)
                rfile.readline()
            environ["wsgi.input"] = io.BytesIO(bytes(body))
            environ["CONTENT_LENGTH"] = str(len(body))
            del environ["HTTP_TRANSFER_ENCODING"]
        return app(environ, start_response)
    return wrapped


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, fmt, *args):  # access log to stderr, compact
        sys.stderr.write("server: %s %s\n" % (self.address_string(), fmt % args))


def build_app():
    app = Application([E2EService], tns=TNS, name="SoapgwE2E",
                      in_protocol=Soap11(validator="lxml"), out_protocol=Soap11())
    return PerHostWsdlApplication(app)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no access log")
    ap.add_argument("--accept-chunked", action="store_true",
                    help="decode chunked request bodies (stock wsgiref+spyne rejects them)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # SOAP faults raised on purpose (fail()) would otherwise log a traceback.
    logging.getLogger("spyne.application.client").setLevel(logging.CRITICAL)
    handler = QuietHandler
    if args.quiet:
        class _H(WSGIRequestHandler):
            def log_message(self, *a):
                pass
        handler = _H
    app = build_app()
    if args.accept_chunked:
        app = dechunk_middleware(app)
    httpd = make_server(args.host, args.port, app,
                        server_class=ThreadingWSGIServer, handler_class=handler)
    sys.stdout.write("READY %d\n" % httpd.server_address[1])
    sys.stdout.flush()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
