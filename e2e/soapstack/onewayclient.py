#!/usr/bin/python3
"""zeep client of the one-way operation notify(text) for the soapgw e2e tests.

Usage: /usr/bin/python3 onewayclient.py --wsdl URL [--address URL] [--calls N]
                                        [--echo TEXT] [--timeout S]

Loads the WSDL from --wsdl and calls, at --address (default: the --wsdl URL
without its query string, as client.py does and for the same reason), the
one-way operation notify(text) N times, each with a distinct text (non-ASCII
and XML-special characters included), then echo(--echo) once: a request-response
operation.  Prints ONE JSON document (sorted keys, ASCII-escaped) on stdout:

  {"notify_output_in_wsdl": false,      # the WSDL's notify has no output (one-way)
   "notify": [{"text": sent, "result": what zeep returned (null = None),
               "status": HTTP status, "body_len": response body length,
               "message_id": X-Soapgw-Message-Id or null}, ...],
   "echo": {"text": sent, "result": returned, "status": HTTP status}}

Exit status: 0 if every call returned, 2 on transport/HTTP/protocol errors,
1 on anything else (a Fault included: no call here may fail).

How zeep 4.2 handles a one-way call (zeep/wsdl/bindings/soap.py,
SoapBinding.process_reply): it POSTs the request and waits for the HTTP
response like any other call; a 201 or 202 with an empty body returns None
at once, whatever the WSDL says.  Any other status with an empty body raises
TransportError, and so does a 200 with an empty body (zeep parses it as XML:
"Server returned response (200) with invalid XML ... Document is empty"), so
the edge's acknowledgement must stay 202 (edge.one_way.accept_status: 200
breaks zeep).  A 200 with an envelope (what spyne itself answers to notify:
<notifyResponse/>) is parsed, and for an operation without wsdl:output
(SoapOperation.process_reply: no output message) also returns None.  So
status and body length are recorded from the requests session to tell the
edge's acknowledgement (202, empty) from the server's own answer.
"""
import argparse
import json
import sys
import urllib.parse

import requests
import zeep
import zeep.exceptions
from zeep.transports import Transport


def payload(i):
    return "one-way %d: Grüße <&> \"q\" 東京 🚀 #%d" % (i, i)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wsdl", required=True, help="WSDL URL, e.g. http://127.0.0.1:8080/?wsdl")
    ap.add_argument("--address", help="service endpoint URL (default: --wsdl URL minus query)")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--echo", default="Grüße, 東京, Ελλάδα, emoji 🚀")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()

    address = args.address
    if not address:
        u = urllib.parse.urlsplit(args.wsdl)
        address = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, "", ""))

    responses = []  # every HTTP response the session got, in order
    session = requests.Session()
    session.hooks["response"].append(lambda r, *a, **kw: responses.append(r))
    transport = Transport(session=session, timeout=args.timeout,
                          operation_timeout=args.timeout, cache=None)
    try:
        client = zeep.Client(args.wsdl, transport=transport)
        service_name, service = next(iter(client.wsdl.services.items()))
        port_name, port = next(iter(service.ports.items()))
        svc = client.create_service(port.binding.name.text, address)
        notify_op = port.binding.get("notify")
    except Exception as e:  # WSDL fetch/parse failure == transport problem
        print("onewayclient: WSDL load failed: %r" % (e,), file=sys.stderr)
        return 2

    def call(name, fn):
        del responses[:]
        try:
            result = fn()
        except zeep.exceptions.Fault as f:
            print("onewayclient: %s: Fault %s: %s" % (name, f.code, f.message), file=sys.stderr)
            return 1, None, None
        except (requests.RequestException, zeep.exceptions.TransportError,
                zeep.exceptions.XMLSyntaxError, zeep.exceptions.XMLParseError) as e:
            print("onewayclient: %s: transport/protocol error: %r" % (name, e), file=sys.stderr)
            return 2, None, None
        except Exception as e:
            print("onewayclient: %s: unexpected error: %r" % (name, e), file=sys.stderr)
            return 1, None, None
        if len(responses) != 1:
            print("onewayclient: %s: %d HTTP responses, want 1" % (name, len(responses)),
                  file=sys.stderr)
            return 1, None, None
        return 0, result, responses[0]

    out = {"notify_output_in_wsdl": notify_op.output is not None, "notify": []}
    for i in range(args.calls):
        text = payload(i)
        rc, result, resp = call("notify %d" % i, lambda: svc.notify(text))
        if rc:
            return rc
        out["notify"].append({
            "text": text,
            "result": None if result is None else repr(result),
            "status": resp.status_code,
            "body_len": len(resp.content),
            "message_id": resp.headers.get("X-Soapgw-Message-Id"),
        })
    rc, result, resp = call("echo", lambda: svc.echo(args.echo))
    if rc:
        return rc
    out["echo"] = {"text": args.echo, "result": result, "status": resp.status_code}

    sys.stdout.write(json.dumps(out, sort_keys=True, ensure_ascii=True, indent=1) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
