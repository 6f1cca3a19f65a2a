#!/usr/bin/python3
"""Real SOAP clients calling an address that answers with a gateway Fault.

Usage: /usr/bin/python3 faultclient.py --call STACK:VERSION:URL [--call ...] [--timeout S]

STACK is zeep or suds (suds speaks SOAP 1.1 only), VERSION 11 or 12. Each call is
echo(text) of a document/literal service described by a WSDL built here (the
endpoint needs no WSDL of its own: the gateway answers before any server would).
Prints ONE JSON document on stdout: a list, in the order of --call, of

  {"call": "STACK:VERSION:URL",
   "outcome": "fault" | "http_error" | "transport_error" | "result" | "error",
   "exception": the exception's class name,
   "code": fault code, "message": faultstring / Reason text (for "fault"),
   "status": the HTTP status the client received (null if none),
   "soapgw_status": the X-Soapgw-Status field, "soapgw_error": the X-Soapgw-Error field}

"fault" means the stack parsed the SOAP Fault and raised its Fault exception
(zeep.exceptions.Fault, suds.WebFault); "http_error" that it reported a bare HTTP
error instead (suds' Exception((status, reason))); "transport_error" zeep's
TransportError. Exit status 0 when the document was printed.
"""
import argparse
import json
import os
import sys
import tempfile

TNS = "urn:soapgw:faults"


def wsdl(versions):
    """A WSDL with a document/literal echo operation bound for each SOAP version."""
    bindings, ports = [], []
    for v in versions:
        ns = "soap" if v == "11" else "soap12"
        bindings.append("""
  <binding name="EchoSoap{v}" type="tns:EchoPortType">
    <{ns}:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>
    <operation name="echo">
      <{ns}:operation soapAction="urn:echo"/>
      <input><{ns}:body use="literal"/></input>
      <output><{ns}:body use="literal"/></output>
    </operation>
  </binding>""".format(v=v, ns=ns))
        ports.append("""
    <port name="EchoSoap{v}Port" binding="tns:EchoSoap{v}">
      <{ns}:address location="http://127.0.0.1:9/"/>
    </port>""".format(v=v, ns=ns))
    return """<?xml version="1.0" encoding="utf-8"?>
<definitions xmlns="http://schemas.xmlsoap.org/wsdl/"
    xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
    xmlns:soap12="http://schemas.xmlsoap.org/wsdl/soap12/"
    xmlns:xsd="http://www.w3.org/2001/XMLSchema"
    xmlns:tns="{tns}" targetNamespace="{tns}" name="Faults">
  <types>
    <xsd:schema targetNamespace="{tns}" elementFormDefault="qualified">
      <xsd:element name="echo">
        <xsd:complexType><xsd:sequence><xsd:element name="text" type="xsd:string"/></xsd:sequence></xsd:complexType>
      </xsd:element>
      <xsd:element name="echoResponse">
        <xsd:complexType><xsd:sequence><xsd:element name="text" type="xsd:string"/></xsd:sequence></xsd:complexType>
      </xsd:element>
    </xsd:schema>
  </types>
  <message name="echoIn"><part name="parameters" element="tns:echo"/></message>
  <message name="echoOut"><part name="parameters" element="tns:echoResponse"/></message>
  <portType name="EchoPortType">
    <operation name="echo"><input message="tns:echoIn"/><output message="tns:echoOut"/></operation>
  </portType>{bindings}
  <service name="Echo">{ports}
  </service>
</definitions>
""".format(tns=TNS, bindings="".join(bindings), ports="".join(ports))


def header(headers, name):
    if headers is None:
        return None
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


def call_zeep(wsdl_path, version, url, timeout):
    import zeep
    import zeep.exceptions
    from zeep.transports import Transport

    class Recording(Transport):
        last = None

        def post(self, address, message, headers):
            r = super().post(address, message, headers)
            self.last = r
            return r

    transport = Recording(timeout=timeout, operation_timeout=timeout, cache=None)
    client = zeep.Client(wsdl_path, transport=transport)
    svc = client.create_service("{%s}EchoSoap%s" % (TNS, version), url)
    out = {}
    try:
        out.update(outcome="result", result=svc.echo(text="soapgw gateway fault test"))
    except zeep.exceptions.Fault as f:
        out.update(outcome="fault", exception=type(f).__name__, code=f.code, message=f.message)
    except zeep.exceptions.TransportError as e:
        out.update(outcome="transport_error", exception=type(e).__name__, message=str(e))
    r = transport.last
    if r is not None:
        out.update(status=r.status_code, soapgw_status=header(r.headers, "X-Soapgw-Status"),
                   soapgw_error=header(r.headers, "X-Soapgw-Error"))
    return out


def call_suds(wsdl_path, version, url, timeout):
    if version != "11":
        raise ValueError("suds speaks SOAP 1.1 only")
    from suds import WebFault
    from suds.client import Client
    from suds.transport import TransportError
    from suds.transport.http import HttpTransport

    class Recording(HttpTransport):
        status = None
        headers = None

        def send(self, request):
            try:
                reply = super().send(request)
            except TransportError as e:
                self.status = e.httpcode
                self.headers = getattr(e.fp, "headers", None)
                raise
            self.status, self.headers = reply.code, reply.headers
            return reply

    transport = Recording(timeout=timeout)
    client = Client("file://" + wsdl_path, transport=transport, location=url, cache=None)
    out = {}
    try:
        out.update(outcome="result", result=str(client.service.echo(text="soapgw gateway fault test")))
    except WebFault as f:
        out.update(outcome="fault", exception=type(f).__name__, code=str(f.fault.faultcode),
                   message=str(f.fault.faultstring))
    except Exception as e:  # suds' report of a non-200, non-500 answer: Exception((status, reason))
        if len(e.args) == 1 and isinstance(e.args[0], tuple):
            out.update(outcome="http_error", exception=type(e).__name__, message=repr(e.args[0]))
        else:
            raise
    out.update(status=transport.status, soapgw_status=header(transport.headers, "X-Soapgw-Status"),
               soapgw_error=header(transport.headers, "X-Soapgw-Error"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--call", action="append", required=True, help="STACK:VERSION:URL")
    ap.add_argument("--timeout", type=float, default=20.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        for name, versions in (("both", ["11", "12"]), ("11", ["11"])):
            paths[name] = os.path.join(d, "faults-%s.wsdl" % name)
            with open(paths[name], "w", encoding="utf-8") as f:
                f.write(wsdl(versions))
        results = []
        for c in args.call:
            stack, version, url = c.split(":", 2)
            try:
                if stack == "zeep":
                    r = call_zeep(paths["both"], version, url, args.timeout)
                elif stack == "suds":
                    r = call_suds(paths["11"], version, url, args.timeout)
                else:
                    raise ValueError("unknown stack %r" % stack)
            except Exception as e:
                r = {"outcome": "error", "exception": type(e).__name__, "message": repr(e)}
            r["call"] = c
            results.append(r)
    json.dump(results, sys.stdout, sort_keys=True, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
