package mockserver

import "github.com/prometheus/client_golang/prometheus"

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
}

func newMetrics(sessions func() float64) *metrics {
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
			Help: "Recorded sessions loaded."}, sessions),
	}
	m.reg.MustRegister(m.requests, m.matches, m.misses, m.open, m.conns, m.connErrors, m.latency, m.holds, m.holdsGivenUp, m.sessions)
	return m
}
