// Package bench is the benchmark suite behind `soapgw bench` (issue #4): it measures
// what an unmodified legacy SOAP client sees through each way of connecting it to its
// server, over emulated links, with the papers' traffic.
//
// A run is the product profiles × configurations × scenarios × concurrency:
//
//   - Profiles are links: "loopback" (no emulator, 127.0.0.1) and the profiles of
//     internal/linkemu (lan, wlan, routed-wlan, wifi-27, 3g, gprs, or a user's YAML
//     file), each two network namespaces, the client site and the server site, joined
//     by a shaping forwarder that counts every IP packet. Site and Link hide which one
//     is in use; linkemu.go is the only file that knows the emulator.
//   - Configurations (Config) start the middle boxes, given both sites and the
//     server's address, and return where the client calls: direct (nothing in between),
//     nginx-pair (Debian's nginx on both sides with keep-alive and gzip; templates in
//     nginx/*.conf.tmpl) and soapgw/<codec> (the soapgw binary as edge and origin). A
//     configuration that cannot run here returns an error wrapping ErrSkipped.
//   - Scenarios come from internal/trafficgen: deploy, stress and stress-oneway (seed 000;
//     stress-oneway is stress's requests as a one-way operation, see below), weather-simple
//     and weather-detailed (seed 004), fixml-1/5/10 (seed 001, the fixml messages filtered
//     by entry count), northwind (seed 002) and charging (seed 003); attachment-200k and
//     attachment-2m (issue 17, not a seed: binary documents inline as base64 of
//     pseudo-random bytes, about 200 KB and 2 MB a response, incompressible beyond the
//     base64) for slow links with large messages; northwind-3m (issue 19: Northwind
//     DataSets of 2.2-3.5 MB, above the 1 MiB coded-message limit).
//   - The client (CallOnce) is a legacy HTTP/1.0 stack: a TCP connection per call, the
//     whole request in one write, the response read to its end and compared byte for
//     byte with the generated response. The ReplayServer, in the server site, finds the
//     exchange by the X-Bench-Call header, checks the request byte for byte and answers
//     the generated response. Any difference makes the run FAILED.
//   - One-way (stress-oneway, seed 000's "Pera"): the server answers 202 Accepted with an
//     empty body. direct and nginx-pair forward the call, so the client waits the round
//     trip; the soapgw configurations mark the operation in edge.one_way (a spool and a
//     ledger in the configuration's directory), so the edge answers 202 from its spool
//     and delivers in the background. The replay server records when each call of the
//     run arrived whole and counts any that arrives twice (a duplicate fails the run);
//     the run waits, bounded, until every call the client saw acknowledged has arrived,
//     before it samples the link and the CPU.
//
// Per run it records latency percentiles (nearest rank; the client's view: a one-way call
// ends at the 202), total time, calls/s, the delivery (when the server had the last
// measured call, messages/s delivered, and what the link's rate allows at the measured
// bytes per exchange), the IP bytes and packets per exchange split pure TCP / TCP data /
// UDP (counters reset after a warm-up, so tunnel and keep-alive set-up are excluded),
// and each middle box's CPU time and peak RSS (/proc, process tree, VmHWM reset per run).
// WriteResults writes results.json, report.md and hand-drawn SVG charts.
package bench
