// Package e2e holds soapgw's end-to-end tests. They build cmd/soapgw once (TestMain) and
// run it as real processes: an origin beside a real server, an edge beside real clients,
// Python zeep against spyne, and raw-socket servers that record the exact bytes they
// receive so transparency is checked byte for byte. One scenario per file.
//
// Every process a test starts is stopped by PID in t.Cleanup; every load loop is bounded
// in count and time; all traffic stays on 127.0.0.1.
package e2e
