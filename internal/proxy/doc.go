// Package proxy is the HTTP side of soapgw: the edge terminates HTTP/1.0 and HTTP/1.1
// from unmodified SOAP clients, the origin calls the unmodified SOAP server. Between them
// each exchange is one tunnel stream (package tunnel over TCP, or package tunnel/quic over
// UDP, reached through the Opener and Stream interfaces defined here, so this package
// depends on neither; cmd/soapgw picks one per peer).
//
// The path of one message, client socket to server socket and back:
//
//	client ──TCP──► Edge.serveConn ── TLS handshake first on an HTTPS listener (clienttls.go)
//	                   │  httpwire.ReadRequest (raw head: casing, order kept)
//	                   │  route (listener, Host, path prefix) → peer + upstream name
//	                   │  100-continue answered locally; size limit → 413 Fault
//	                   ▼
//	                requestHead{upstream, method, target, end-to-end fields} + body
//	                   │  Opener.OpenStream → Stream.Write… CloseWrite (CRC-32C trailer)
//	    ═══════════════╪══════════════ tunnel (one persistent, multiplexed connection) ═══
//	                   ▼
//	              Origin.ServeStream ── upstream configured? (else Fault: no open proxy)
//	                   │  pooled keep-alive conn (liveness-checked), HTTP/1.1 or 1.0,
//	                   │  TLS for https (UpstreamTLS: private CA, client certificate)
//	                   ▼
//	server ◄──TCP── head as the client sent it + body (a chunked one read whole first and
//	                sent with Content-Length, unless the upstream is set to take chunks)
//	server ──TCP──► httpwire.ReadResponse (1xx skipped) → responseHead + streamed body
//	                (read while a large request is still written: a server may answer
//	                before it has read it, early.go)
//	    ═══════════════╪══════════════ tunnel ═══════════════════════════════════════════
//	                   ▼
//	client ◄──TCP── Edge.writeResponse: status, reason, fields byte for byte; framing for
//	                the client (Content-Length for HTTP/1.0, one write, TCP_NODELAY)
//
// One-way operations (OneWayConfig) leave this path at the edge once the body is read:
// the request message is synced to the spool and the client answered 202 at once; the
// forwarder (forward.go) sends it later on a stream of its own, and the origin runs it
// at most once per message id with its ledger (oneway_edge.go, oneway_origin.go).
//
// Transparency rules. Request method, target, header field names (with their casing,
// e.g. "SOAPAction"), values, order and body reach the server unchanged; status code,
// reason phrase, fields and body reach the client unchanged. Only hop-by-hop fields (RFC
// 9110 §7.6.1: Connection and the fields it names, Keep-Alive, Proxy-Connection, TE,
// Transfer-Encoding, Upgrade, Trailer) are dropped, and framing is added where the next
// hop needs it: Transfer-Encoding: chunked or Content-Length for a body whose length was
// not known, Connection: keep-alive/close for the hop's persistence.
//
// Errors the gateway makes are SOAP Faults in the client's SOAP version (1.1 soap:Server,
// 1.2 env:Receiver; Client/Sender when the HTTP-semantic status is a 4xx), with a
// faultstring naming the cause, an X-Soapgw-Error header and the HTTP-semantic status
// (502/503/504/413/...) in X-Soapgw-Status; the status line is the SOAP binding's (500, or
// 400 for env:Sender) or the HTTP-semantic one, as Limits.FaultStatus says (fault.go). An exchange is retried only when the tunnel refused
// it before the origin saw it (stream refused, GOAWAY), which is the one case where the
// server provably never received the request.
package proxy
