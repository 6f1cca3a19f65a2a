// Package soapdemo provides the workload that `soapgw demo` and the
// end-to-end tests measure the gateways with: the "Stress" scenario of
// Kangasharju et al. (seed 000), an example SOAP service that answers it,
// and a load client that behaves like the legacy Apache Axis 1.0 client of
// that study.
//
// Why a fixed, paper-shaped workload instead of random envelopes: the demo
// is only convincing if its numbers can be compared with the study's. In
// the Stress scenario a calendaring client fills every half hour of a year
// (17472 = 2*24*364 calls), each call a 652-byte SOAP request answered by a
// 464-byte SOAP response. [StressRequest] and [StressResponse] produce
// envelopes of exactly those sizes, with every varying field fixed-width,
// so every call of the scenario has the same size and byte counts over a
// link are predictable (17472 * (652 + 464) bytes of SOAP per run).
//
// Why the request and response differ in shape: the sizes in the paper
// only add up one way. The request's 394 bytes of overhead around its
// 258-byte document match an RPC-style Axis envelope (the ns1:addEntry
// wrapper with soapenv:encodingStyle); the response's 269 bytes of
// overhead around its 195-byte document match an envelope with the
// document placed directly in the Body. So the request is RPC-wrapped and
// the response's document is itself the ns1:addEntryResponse element.
//
// Why the sizes exclude HTTP headers: Table 5 of the paper settles it. The
// persistent protocol (Pers: a decimal length, then the envelope) sent
// 21018279 bytes in data packets for 17472 calls, 1203 bytes per call;
// 652 + 464 + two length prefixes + two 40-byte TCP/IP headers is 1203. So
// "total size" there means the SOAP envelope. The HTTP binding adds the
// request line and Axis headers (279 bytes with a 14-byte Host) and the
// net/http response header (116 bytes) on top; see [StressRequest].
//
// Why the service checks the request and echoes the slot: a gateway that
// mixed up, truncated or corrupted messages must fail the demo loudly. The
// handler answers only an entry that matches its slot exactly, and its
// response names that slot, so a response delivered to the wrong call is
// detected by comparing it with [StressResponse].
//
// Why the client speaks HTTP/1.0 over a raw socket ([CallHTTP10]): the
// point of soapgw is what a legacy client pays per call, one new TCP
// connection, one handshake and one teardown each time. net/http's client
// would pool connections and hide exactly that cost.
package soapdemo
