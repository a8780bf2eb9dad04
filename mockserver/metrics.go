package mockserver

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus metrics, in a registry of its own so
// several servers (tests) never collide.
type metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	matches    *prometheus.CounterVec
	misses     *prometheus.CounterVec
	open       prometheus.Gauge
	conns      prometheus.Counter
	connErrors prometheus.Counter
	latency    prometheus.Histogram
	sessions   prometheus.GaugeFunc

	mu     sync.RWMutex
	cached map[string]prometheus.Counter // "vec\x00label" → counter
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
		sessions: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "retrace_mock_sessions",
			Help: "Recorded sessions loaded."}, sessions),
		cached: map[string]prometheus.Counter{},
	}
	m.reg.MustRegister(m.requests, m.matches, m.misses, m.open, m.conns, m.connErrors, m.latency, m.sessions)
	return m
}

func (m *metrics) counter(vec *prometheus.CounterVec, name, label string) prometheus.Counter {
	k := name + "\x00" + label
	m.mu.RLock()
	c := m.cached[k]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	c = vec.WithLabelValues(label)
	m.mu.Lock()
	m.cached[k] = c
	m.mu.Unlock()
	return c
}

func (m *metrics) request(proto string)  { m.counter(m.requests, "r", proto).Inc() }
func (m *metrics) match(strategy string) { m.counter(m.matches, "m", strategy).Inc() }
func (m *metrics) miss(proto string)     { m.counter(m.misses, "x", proto).Inc() }
