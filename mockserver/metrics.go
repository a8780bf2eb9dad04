package mockserver

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, in a registry of its own so
// several servers (tests) never collide.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	matches      *prometheus.CounterVec
	misses       *prometheus.CounterVec
	open         prometheus.Gauge
	conns        prometheus.Counter
	connErrors   prometheus.Counter
	latency      prometheus.Histogram
	holds        prometheus.Counter
	holdsGivenUp prometheus.Counter
	sessions     prometheus.GaugeFunc

	traces         prometheus.GaugeFunc
	aliases        prometheus.GaugeFunc
	unknownTraces  prometheus.Counter
	dropped        *prometheus.CounterVec
	aliasesRefused prometheus.Counter
	connsRefused   prometheus.Counter
	unauthorized   prometheus.Counter
	logSuppressed  prometheus.Counter
}

// gauges are the values the metrics read from the server when scraped.
type gauges struct {
	sessions, traces, aliases func() float64
}

func newMetrics(g gauges) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retrace_mock_requests_total",
			Help: "Requests received, by protocol."}, []string{"proto"}),
		matches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retrace_mock_matches_total",
			Help: "Requests answered from a recording, by matching strategy."}, []string{"strategy"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retrace_mock_misses_total",
			Help: "Requests no recording answered (missing mocks), by protocol."}, []string{"proto"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "retrace_mock_open_connections",
			Help: "Framed connections open now."}),
		conns: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_connections_total",
			Help: "Framed connections accepted."}),
		connErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_connection_errors_total",
			Help: "Connections closed because of a frame or protocol error, or a timeout."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "retrace_mock_answer_seconds",
			Help:    "Time to find and build the answer to one request.",
			Buckets: []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 1e-1}}),
		holds: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_causal_holds_total",
			Help: "Answers held back until the trace sent the calls its recording sent before them."}),
		holdsGivenUp: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_causal_holds_given_up_total",
			Help: "Held answers released after CausalWait without every call recorded before them."}),
		sessions: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "retrace_mock_sessions",
			Help: "Recorded sessions loaded."}, g.sessions),
		traces: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "retrace_mock_traces",
			Help: "Traces the server holds state for."}, g.traces),
		aliases: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "retrace_mock_aliases",
			Help: "Aliases registered (POST /traces)."}, g.aliases),
		unknownTraces: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_unknown_trace_requests_total",
			Help: "Requests whose trace id names no recording and no alias (answered as missing mocks, kept nowhere)."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "retrace_mock_traces_dropped_total",
			Help: "Trace states and aliases dropped without a DELETE: ttl (trace idle for TraceTTL), lru (MaxTraces reached), alias_ttl (alias unused for TraceTTL)."},
			[]string{"reason"}),
		aliasesRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_aliases_refused_total",
			Help: "Alias registrations refused because MaxAliases were registered."}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_connections_refused_total",
			Help: "Framed connections closed on accept because MaxConns were open."}),
		unauthorized: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_admin_unauthorized_total",
			Help: "Admin requests refused for a missing or wrong token."}),
		logSuppressed: prometheus.NewCounter(prometheus.CounterOpts{Name: "retrace_mock_log_lines_suppressed_total",
			Help: "Repeated log lines held back by the rate limit (LogWindow, LogBurst)."}),
	}
	m.reg.MustRegister(m.requests, m.matches, m.misses, m.open, m.conns, m.connErrors, m.latency, m.holds, m.holdsGivenUp, m.sessions,
		m.traces, m.aliases, m.unknownTraces, m.dropped, m.aliasesRefused, m.connsRefused, m.unauthorized, m.logSuppressed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
