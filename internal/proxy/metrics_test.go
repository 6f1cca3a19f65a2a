package proxy

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// metricNames pins the exported names: dashboards and alerts depend on them.
var metricNames = []string{
	"soapgw_edge_client_connections",
	"soapgw_edge_client_connections_refused_total",
	"soapgw_edge_client_connections_total",
	"soapgw_edge_retries_total",
	"soapgw_exchange_duration_seconds",
	"soapgw_exchanges_total",
	"soapgw_gateway_errors_total",
	"soapgw_http_bytes_total",
	"soapgw_oneway_deliveries_total",
	"soapgw_oneway_delivery_delay_seconds",
	"soapgw_oneway_oldest_age_seconds",
	"soapgw_oneway_rejected_total",
	"soapgw_oneway_spool",
	"soapgw_origin_held_bytes",
	"soapgw_origin_held_dropped_total",
	"soapgw_origin_held_exchanges",
	"soapgw_origin_held_lost_total",
	"soapgw_origin_oneway_total",
	"soapgw_origin_pinned_connections",
	"soapgw_origin_pins_evicted_total",
	"soapgw_origin_readahead_bytes",
	"soapgw_origin_responses_diverted_total",
	"soapgw_origin_resume_tombstones",
	"soapgw_origin_upstream_connections_total",
	"soapgw_resumes_total",
	"soapgw_soap_faults_total",
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)

	// Exercise them through a real edge ⇄ origin exchange, a gateway error and a retry.
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{
		Metrics:   m,
		Upstreams: []Upstream{{Name: "up", Address: up.addr(), PoolSize: 1}},
		Routes: []Route{
			{PathPrefix: "/ghost", Peer: "p", Upstream: "ghost"},
			{Peer: "p", Upstream: "up"},
		},
	})
	cl := env.dial()
	cl.send(soapRequest(1, "/svc", "", "<x/>"))
	resp, _ := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	cl.send(soapRequest(1, "/ghost", "", "<x/>"))
	f := cl.readFault()
	require.Equal(t, causeUnknownUpstream, f.cause)
	m.retries.WithLabelValues("p").Inc() // retries have their own end-to-end test

	// The origin records an exchange once its response is sent, which can be after the
	// client has it: wait for the origin's side of both exchanges.
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(m.exchanges.WithLabelValues("origin", "up", "Add", "200", "ok")) == 1 &&
			testutil.ToFloat64(m.gatewayErrors.WithLabelValues("origin", causeUnknownUpstream)) > 0 &&
			testutil.CollectAndCount(m.duration) == 4
	}, 5*time.Second, 5*time.Millisecond, "origin metrics of the two exchanges")

	require.Equal(t, 1.0, testutil.ToFloat64(m.clientConns))
	require.Equal(t, 1.0, testutil.ToFloat64(m.upstreamConns.WithLabelValues("up")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.connsTotal))
	// The operation comes from SOAPAction "urn:Add".
	require.Equal(t, 1.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "up", "Add", "200", "ok")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.exchanges.WithLabelValues("origin", "up", "Add", "200", "ok")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "ghost", "Add", "502", "gateway_error")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.faults.WithLabelValues("edge", "ghost", "gateway", "Server")))
	require.Positive(t, testutil.ToFloat64(m.gatewayErrors.WithLabelValues("origin", causeUnknownUpstream)))
	require.Positive(t, testutil.ToFloat64(m.bytes.WithLabelValues("edge", "client_in")))
	require.Positive(t, testutil.ToFloat64(m.bytes.WithLabelValues("edge", "client_out")))
	require.Positive(t, testutil.ToFloat64(m.bytes.WithLabelValues("origin", "server_out")))
	require.Positive(t, testutil.ToFloat64(m.bytes.WithLabelValues("origin", "server_in")))
	require.Equal(t, 4, testutil.CollectAndCount(m.duration), "edge and origin, each for the ok and the failed exchange")

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	require.Equal(t, metricNames, names)

	for _, c := range append([]prometheus.Collector{m.exchanges, m.faults, m.connsTotal, m.gatewayErrors, m.duration, m.bytes, m.clientConns, m.retries, m.upstreamConns}, m.oneWay.collectors()...) {
		problems, err := testutil.CollectAndLint(c)
		require.NoError(t, err)
		require.Empty(t, problems)
	}
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestNewMetricsUnregistered(t *testing.T) {
	m := NewMetrics(nil)
	m.exchange("edge", "u", "op", 200, "ok", 0)
	require.Equal(t, 1.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "u", "op", "200", "ok")))
	// Two sets of collectors can live side by side when unregistered, and one registry
	// refuses a second set (the names would collide).
	_ = NewMetrics(nil)
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	require.Panics(t, func() { NewMetrics(reg) })
}

// TestExchangeSeriesCached: the series an exchange touches are resolved once per label
// set, counted in the right one, and no more of them are kept than the operation bound
// lets the vector make.
func TestExchangeSeriesCached(t *testing.T) {
	m := NewMetrics(nil)
	m.exchange("edge", "u", "op", 200, "ok", time.Millisecond)
	m.exchange("edge", "u", "op", 200, "ok", time.Millisecond)
	m.exchange("edge", "u", "op", 500, "soap_fault", 0)
	m.addBytes("edge", "client_in", 10)
	m.addBytes("edge", "client_in", 5)
	require.Equal(t, 2.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "u", "op", "200", "ok")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "u", "op", "500", "soap_fault")))
	require.Equal(t, 15.0, testutil.ToFloat64(m.bytes.WithLabelValues("edge", "client_in")))
	require.Equal(t, 1, testutil.CollectAndCount(m.duration), "one duration series for edge and u")
	require.Equal(t, 1, testutil.CollectAndCount(m.bytes), "only the series used")

	for i := range 3 * maxOperations {
		m.exchange("edge", "u", fmt.Sprintf("op%d", i), 200, "ok", 0)
	}
	// "op" (two statuses), the maxOperations-1 names the bound still admits, then "other".
	require.Len(t, m.exchangeSeries.m, 2+(maxOperations-1)+1)
	require.Equal(t, float64(3*maxOperations-(maxOperations-1)), testutil.ToFloat64(m.exchanges.WithLabelValues("edge", "u", "other", "200", "ok")))
}

// Regression: an error detected by the origin used to be counted twice under
// role="origin" when edge and origin share a Metrics (a node running both roles). The
// origin counts it under role="origin", the edge that answers the client under role="edge".
func TestOriginGatewayErrorCountedOncePerRole(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	env := newEnv(t, envConfig{Metrics: m, Routes: []Route{{Peer: "p", Upstream: "ghost"}}})
	cl := env.dial()
	cl.send(soapRequest(1, "/svc", "", "<x/>"))
	f := cl.readFault()
	require.Equal(t, causeUnknownUpstream, f.cause)
	require.Equal(t, 1.0, testutil.ToFloat64(m.gatewayErrors.WithLabelValues("origin", causeUnknownUpstream)),
		"one unknown-upstream error detected by the origin")
	require.Equal(t, 1.0, testutil.ToFloat64(m.gatewayErrors.WithLabelValues("edge", causeUnknownUpstream)),
		"one unknown-upstream fault answered by the edge")
}
