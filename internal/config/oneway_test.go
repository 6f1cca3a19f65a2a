package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const oneWayEdge = `node: e1
edge:
  listeners: [{name: main, listen: "127.0.0.1:8080"}]
  peers: [{name: dc1, address: "127.0.0.1:7070", insecure: true}]
  routes: [{peer: dc1, upstream: svc}]
  one_way:
    spool: /tmp/spool.db
    operations:
      - action: "urn:Notify"
`

func TestOneWayDefaults(t *testing.T) {
	c, err := Parse("edge.yaml", []byte(oneWayEdge+`origin:
  listen: "127.0.0.1:7070"
  insecure: true
  upstreams: [{name: svc, url: "http://127.0.0.1:9000"}]
  one_way:
    ledger: /tmp/ledger.db
`))
	require.NoError(t, err)
	ow := c.Edge.OneWay
	require.Equal(t, EdgeOneWay{Spool: "/tmp/spool.db", MaxBytes: 256 << 20, MaxMessages: 100_000, MaxDeadLetters: 10_000,
		DeadLetters: true, AcceptStatus: 202, Deliveries: 1024, RetryMax: 30 * time.Second,
		Operations: []OneWayOperation{{Action: "urn:Notify"}}}, *ow)
	require.Equal(t, OriginOneWay{Ledger: "/tmp/ledger.db", Retention: 168 * time.Hour, InDoubt: InDoubtHold, MaxConcurrent: 16}, *c.Origin.OneWay)
}

// An operation given by a WSDL expands to the WSDL's one-way operations, with its
// path_prefix.
func TestOneWayOperationFromWSDL(t *testing.T) {
	c, err := Parse("edge.yaml", []byte(oneWayEdge+"      - wsdl: ../wsdl/testdata/audit-rpc.wsdl\n        path_prefix: /axis/\n"))
	require.NoError(t, err)
	ops, names, err := c.Edge.OneWay.Operations[1].Expand()
	require.NoError(t, err)
	require.Equal(t, []OneWayOperation{{PathPrefix: "/axis/", Operation: "Record"}}, ops)
	require.Equal(t, []string{"Record"}, names)
	ops, names, err = c.Edge.OneWay.Operations[0].Expand()
	require.NoError(t, err)
	require.Equal(t, []OneWayOperation{{Action: "urn:Notify"}}, ops)
	require.Nil(t, names)
}

func TestOneWayErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       Error
	}{
		{"no spool", `node: e1
edge:
  listeners: [{name: main, listen: "127.0.0.1:8080"}]
  peers: [{name: dc1, address: "127.0.0.1:7070", insecure: true}]
  routes: [{peer: dc1, upstream: svc}]
  one_way:
    operations: [{action: "urn:Notify"}]
`, Error{File: "e.yaml", Line: 6, Path: "edge.one_way.spool", Msg: missing}},
		{"empty operation", oneWayEdge + "      - path_prefix: /x\n", Error{File: "e.yaml", Line: 10, Path: "edge.one_way.operations[1]", Msg: "set action, operation, both, or wsdl"}},
		{"wsdl and action", oneWayEdge + "      - wsdl: ../wsdl/testdata/spyne.wsdl\n        action: urn:x\n", Error{File: "e.yaml", Line: 10, Path: "edge.one_way.operations[1].wsdl", Msg: "exclusive with action and operation: the WSDL names its operations"}},
		{"wsdl missing", oneWayEdge + "      - wsdl: /nonexistent/service.wsdl\n", Error{File: "e.yaml", Line: 10, Path: "edge.one_way.operations[1].wsdl", Msg: "open /nonexistent/service.wsdl: no such file or directory"}},
		{"wsdl without one-way", oneWayEdge + "      - wsdl: testdata/no-oneway.wsdl\n", Error{File: "e.yaml", Line: 10, Path: "edge.one_way.operations[1].wsdl", Msg: "testdata/no-oneway.wsdl: wsdl: no one-way operation (an input without an output) in a SOAP binding"}},
		{"accept status", oneWayEdge + "    accept_status: 204\n", Error{File: "e.yaml", Line: 10, Path: "edge.one_way.accept_status", Msg: "must be 202 or 200, got 204"}},
		{"in_doubt", `node: o1
origin:
  listen: "127.0.0.1:7070"
  insecure: true
  upstreams: [{name: svc, url: "http://127.0.0.1:9000"}]
  one_way:
    ledger: /tmp/l.db
    in_doubt: maybe
`, Error{File: "e.yaml", Line: 8, Path: "origin.one_way.in_doubt", Msg: `unknown in_doubt "maybe" (allowed: hold, redeliver)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("e.yaml", []byte(tc.yaml))
			var cerr *Error
			require.True(t, errors.As(err, &cerr), "%v", err)
			require.Equal(t, tc.want, *cerr)
		})
	}
}
