#!/usr/bin/python3
"""spyne SOAP 1.1 (document/literal) test service for the soapgw e2e tests.

Usage: /usr/bin/python3 server.py [--host 127.0.0.1] [--port 0] [--record FILE]
Prints exactly one line "READY <port>" on stdout (flushed) once listening.
Endpoint: http://HOST:PORT/  (WSDL: GET http://HOST:PORT/?wsdl)
--record FILE: the one-way operation notify(text) appends each text it receives
to FILE as one JSON string per line (ASCII-escaped), in one write each.
"""
import argparse
import datetime
import io
import json
import logging
import os
import socketserver
import sys
import threading
from xml.sax.saxutils import escape as xml_escape
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from spyne import Application, Array, ComplexModel, DateTime, Fault, Integer, ServiceBase, Unicode, rpc
from spyne.protocol.soap import Soap11
from spyne.server.wsgi import WsgiApplication

TNS = "urn:soapgw:e2e"
EPOCH = datetime.datetime(2024, 1, 1, 8, 0, 0, tzinfo=datetime.timezone.utc)
MAX_ENTRIES = 5000

# Where notify() records what it receives (--record); None: nowhere.
RECORD = {"fd": None, "lock": threading.Lock()}


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

    # One-way (WSDL operation with an input and no output): spyne's _is_async drops
    # the output from the portType and the binding.  Called directly, spyne still
    # answers 200 with an empty <notifyResponse/> envelope (zeep returns None for it,
    # as for a 202 with no body).  See drop_dangling_headers for the WSDL fix it needs.
    @rpc(Unicode, _is_async=True)
    def notify(ctx, text):
        line = (json.dumps(text, ensure_ascii=True) + "\n").encode("ascii")
        with RECORD["lock"]:
            if RECORD["fd"] is not None:
                os.write(RECORD["fd"], line)


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
        self.doc.wsdl11.event_manager.add_listener("wsdl_document_built",
                                                   drop_dangling_headers)
        self.doc.wsdl11.build_interface_document(self.PLACEHOLDER)
        self._wsdl_template = self.doc.wsdl11.get_interface_document()
        assert self._wsdl_template.count(self.PLACEHOLDER.encode()) == 1

    def handle_wsdl_request(self, req_env, start_response, url):
        loc = xml_escape(url, {'"': "&quot;"}).encode("utf-8")
        body = self._wsdl_template.replace(self.PLACEHOLDER.encode(), loc)
        start_response("200 OK", [("Content-Type", "text/xml; charset=utf-8"),
                                  ("Content-Length", str(len(body)))])
        return [body]


def drop_dangling_headers(wsdl11):
    """spyne 2.14 gives the binding input of an _is_async (one-way) operation
    WS-Addressing soap:header elements (ReplyTo, MessageID) whose wsdl:messages it
    defines only when the service has callbacks; this one has none, so zeep cannot
    load the WSDL ("No definition '{urn:soapgw:e2e}ReplyToHeader' in 'messages'").
    Remove the soap:header elements that name an undefined message, in the tree
    spyne built, before spyne serializes it."""
    root = wsdl11.root_elt
    wsdl_ns = "http://schemas.xmlsoap.org/wsdl/"
    defined = {m.get("name") for m in root.iterfind("{%s}message" % wsdl_ns)}
    for el in list(root.iter("{http://schemas.xmlsoap.org/wsdl/soap/}header")):
        name = el.get("message", "").rpartition(":")[2]
        if name not in defined:
            el.getparent().remove(el)


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
    # socketserver's listen backlog is 5. The origin delivers a spool's one-way messages
    # at once, a connection each (wsgiref closes after every answer): on a busy machine
    # the accept queue overflowed, connects waited 1 s for a SYN resend, and one got a
    # reset after its request was sent, which the origin must count as in doubt (it
    # cannot know whether the server ran it). Servers in production listen with 100+.
    request_queue_size = 128


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
    ap.add_argument("--record", metavar="FILE",
                    help="append each notify(text) received to FILE (a JSON string a line)")
    args = ap.parse_args()
    if args.record:
        RECORD["fd"] = os.open(args.record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
