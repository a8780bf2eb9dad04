package mockserver

import (
	"fmt"
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
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
	answers        answerTimes
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

// answerTimes is the exact distribution of answer times behind
// AnswerTimes (the Prometheus histogram's buckets are too coarse for
// percentiles of microseconds).
type answerTimes struct {
	mu sync.Mutex
	h  *hdr.Histogram // nil until the first answer
}

// Geometry of answer-time histograms: nanoseconds, 1 ns to 10 s.
const (
	answerLowest  = 1
	answerHighest = int64(10 * time.Second)
	answerDigits  = 3
)

// NewAnswerHistogram returns an empty histogram with the geometry of
// AnswerTimes.Hist.
func NewAnswerHistogram() *hdr.Histogram { return hdr.New(answerLowest, answerHighest, answerDigits) }

func (a *answerTimes) record(d time.Duration) {
	ns := min(max(int64(d), answerLowest), answerHighest)
	a.mu.Lock()
	if a.h == nil {
		a.h = NewAnswerHistogram()
	}
	_ = a.h.RecordValue(ns) // in range by construction
	a.mu.Unlock()
}

func (a *answerTimes) snapshot() (AnswerTimes, error) {
	a.mu.Lock()
	h := NewAnswerHistogram()
	if a.h != nil {
		h.Merge(a.h)
	}
	a.mu.Unlock()
	return SummarizeAnswers(h)
}

// SummarizeAnswers returns the AnswerTimes of a histogram of answer
// times in nanoseconds (NewAnswerHistogram's geometry).
func SummarizeAnswers(h *hdr.Histogram) (AnswerTimes, error) {
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		return AnswerTimes{}, fmt.Errorf("encoding answer times: %w", err)
	}
	us := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
	return AnswerTimes{Answers: h.TotalCount(), P50Us: us(50), P90Us: us(90), P99Us: us(99), P999Us: us(99.9),
		MaxUs: float64(h.Max()) / 1e3, Hist: string(b)}, nil
}

// DecodeAnswers decodes AnswerTimes.Hist, checking its geometry.
func DecodeAnswers(s string) (*hdr.Histogram, error) {
	if s == "" {
		return NewAnswerHistogram(), nil
	}
	h, err := hdr.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("answer times: %w", err)
	}
	if h.LowestTrackableValue() != answerLowest || h.HighestTrackableValue() != answerHighest || h.SignificantFigures() != answerDigits {
		return nil, fmt.Errorf("answer times: histogram of another geometry (%d–%d, %d digits)",
			h.LowestTrackableValue(), h.HighestTrackableValue(), h.SignificantFigures())
	}
	return h, nil
}
