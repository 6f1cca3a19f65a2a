#!/usr/bin/python3
"""zeep client for the soapgw e2e tests.

Usage: /usr/bin/python3 client.py --wsdl URL [--address URL] [--timeout S]

Downloads the WSDL from --wsdl (so the ?wsdl GET itself also goes through the
gateway when URL points at it), calls every operation and prints ONE canonical
JSON document (sorted keys, ASCII-escaped) on stdout.  Diagnostics go to stderr.

Service address used for the calls: --address if given, otherwise the --wsdl
URL without its query string ("http://h:p/?wsdl" -> "http://h:p/").  The
address advertised inside the WSDL is deliberately NOT used by default, so the
calls follow the same path as the WSDL download even if a proxy/gateway
rewrites the Host header (spyne derives soap:address from Host).

Exit status: 0 if every call completed (a SOAP fault is an expected outcome),
2 on transport/HTTP/protocol errors, 1 on anything else unexpected.
"""
import argparse
import datetime
import decimal
import hashlib
import json
import sys
import urllib.parse

import requests
import zeep
import zeep.exceptions
import zeep.helpers
from zeep.transports import Transport

NON_ASCII = "Grüße, 東京, Ελλάδα, emoji 🚀"
# ~100 KiB of text (102400 code points, > 150 KB UTF-8), mixing ASCII,
# 2/3/4-byte UTF-8 and characters that must be XML-escaped.
_UNIT = "abc <&> \"q\" 'a' Grüße 東京 Ελλάδα 🚀 \t0123456789\n"
BIG = (_UNIT * (102400 // len(_UNIT) + 1))[:102400]


def canon(v):
    """zeep objects -> plain, deterministic JSON-able values."""
    v = zeep.helpers.serialize_object(v, target_cls=dict)
    if isinstance(v, dict):
        return {str(k): canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc)
        return v.isoformat()
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return {"bytes_sha256": hashlib.sha256(v).hexdigest(), "len": len(v)}
    return v


def digest(s):
    if s is None:
        return None
    return {"len": len(s), "utf8_len": len(s.encode("utf-8")),
            "sha256": hashlib.sha256(s.encode("utf-8")).hexdigest(),
            "equals_input": s == BIG}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wsdl", required=True, help="WSDL URL, e.g. http://127.0.0.1:8080/?wsdl")
    ap.add_argument("--address", help="service endpoint URL (default: --wsdl URL minus query)")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()

    address = args.address
    if not address:
        u = urllib.parse.urlsplit(args.wsdl)
        address = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, "", ""))

    session = requests.Session()
    transport = Transport(session=session, timeout=args.timeout,
                          operation_timeout=args.timeout, cache=None)
    try:
        client = zeep.Client(args.wsdl, transport=transport)
        service_name, service = next(iter(client.wsdl.services.items()))
        port_name, port = next(iter(service.ports.items()))
        print("client: wsdl advertises %s; calling %s"
              % (port.binding_options.get("address"), address), file=sys.stderr)
        svc = client.create_service(port.binding.name.text, address)
    except Exception as e:  # WSDL fetch/parse failure == transport problem
        print("client: WSDL load failed: %r" % (e,), file=sys.stderr)
        return 2

    calls = [
        ("echo_non_ascii", lambda: svc.echo(NON_ASCII), canon),
        ("echo_empty", lambda: svc.echo(""), canon),
        ("echo_100k", lambda: svc.echo(BIG), digest),
        ("add", lambda: svc.add(2, 40), canon),
        ("calendar_entries", lambda: svc.calendar_entries(1000), canon),
        ("fail", lambda: svc.fail("soapgw e2e"), canon),
    ]
    out = {"results": {}}
    for name, call, conv in calls:
        try:
            out["results"][name] = {"result": conv(call())}
        except zeep.exceptions.Fault as f:
            out["results"][name] = {"fault": {"code": f.code, "message": f.message}}
        except (requests.RequestException, zeep.exceptions.TransportError,
                zeep.exceptions.XMLSyntaxError, zeep.exceptions.XMLParseError) as e:
            print("client: %s: transport/protocol error: %r" % (name, e), file=sys.stderr)
            return 2
        except Exception as e:
            print("client: %s: unexpected error: %r" % (name, e), file=sys.stderr)
            return 1

    sys.stdout.write(json.dumps(out, sort_keys=True, ensure_ascii=True, indent=1) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
