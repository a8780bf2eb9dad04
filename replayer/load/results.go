package load

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// ResultsVersion is the version of results.json and timeseries.jsonl.
const ResultsVersion = 1

// File names of a shard's results.
const (
	ResultsFile    = "results.json"
	TimeseriesFile = "timeseries.jsonl"
	ErrorsFile     = "errors.jsonl"
)

// MaxAPIs bounds the number of APIs counted separately; requests of further
// APIs are counted under OtherAPI, so that an input of unbounded path
// variety cannot exhaust memory (each API holds a histogram of ~190 KB).
const MaxAPIs = 1000

// OtherAPI collects the requests of APIs beyond MaxAPIs.
const OtherAPI = "(other)"

// Stats are the counts and latencies of one API, or of all (API "total").
// The percentile fields are for people reading the file; Hist is the
// histogram they come from and what analyze merges.
type Stats struct {
	API    string           `json:"api"`
	Count  int64            `json:"count"`
	Errors int64            `json:"errors"`
	Status map[string]int64 `json:"status,omitempty"` // HTTP status, or "grpc-<code>" for gRPC answers → count
	P50Ms  float64          `json:"p50_ms"`
	P90Ms  float64          `json:"p90_ms"`
	P99Ms  float64          `json:"p99_ms"`
	P999Ms float64          `json:"p999_ms"`
	MaxMs  float64          `json:"max_ms"`
	MeanMs float64          `json:"mean_ms"`
	Hist   string           `json:"hist"` // HdrHistogram V2, base64, µs
}

// Results is results.json: what one shard measured.
type Results struct {
	V        int       `json:"v"`
	Shard    string    `json:"shard"` // "I/N"
	Mode     Mode      `json:"mode"`
	Target   string    `json:"target"`
	Input    string    `json:"input"`
	Started  time.Time `json:"started"` // intended time of the first request slot
	Ended    time.Time `json:"ended"`   // when the last answer arrived
	Lines    int64     `json:"lines"`   // valid requests read from the input
	Owned    int64     `json:"owned"`   // of which this shard's
	Sent     int64     `json:"sent"`
	BadLines int64     `json:"bad_lines"`
	// Late counts requests sent more than LateAfter after their intended
	// time: the generator (or Concurrency) could not keep the pace. Their
	// latency still counts from the intended time.
	Late int64 `json:"late"`
	// Incomplete, when not empty, says why the run stopped before its
	// input or duration ended ("interrupted"): the results cover part of
	// the run. Empty (absent) for a complete run.
	Incomplete string `json:"incomplete,omitempty"`
	// Passes counts the times the input was started over (rate and ramp
	// modes repeat it to fill the duration); 0 or 1 for one pass.
	Passes int     `json:"passes,omitempty"`
	Total  Stats   `json:"total"`
	APIs   []Stats `json:"apis"`
	// Mock lists, for a write-path load test run with mock admin URLs,
	// each mock server's answers during the run (MockWatch).
	Mock []MockAnswers `json:"mock,omitempty"`
}

// LateAfter is how far behind its intended time a send counts as late.
const LateAfter = 10 * time.Millisecond

// Second is one line of timeseries.jsonl: the requests that completed in
// one wall-clock second (Unix time T), all APIs together.
type Second struct {
	V      int     `json:"v"`
	T      int64   `json:"t"`
	Sent   int64   `json:"sent"`
	Count  int64   `json:"count"`
	Errors int64   `json:"errors"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	Hist   string  `json:"hist"`
}

// FillStats sets the percentile fields of s from h (and Hist when encode).
func FillStats(s *Stats, h *hdr.Histogram, encode bool) error {
	s.P50Ms = Millis(h.ValueAtQuantile(50))
	s.P90Ms = Millis(h.ValueAtQuantile(90))
	s.P99Ms = Millis(h.ValueAtQuantile(99))
	s.P999Ms = Millis(h.ValueAtQuantile(99.9))
	s.MaxMs = Millis(h.Max())
	s.MeanMs = h.Mean() / 1000
	if encode {
		enc, err := EncodeHistogram(h)
		if err != nil {
			return err
		}
		s.Hist = enc
	}
	return nil
}

type apiStats struct {
	hist   *hdr.Histogram
	count  int64
	errors int64
	status map[int]int64
}

func newAPIStats() *apiStats { return &apiStats{hist: NewHistogram(), status: map[int]int64{}} }

func (a *apiStats) add(d time.Duration, o Outcome) {
	recordLatency(a.hist, d)
	a.count++
	if o.Err != nil {
		a.errors++
	}
	if o.Status != 0 {
		a.status[o.Status]++
	}
}

func (a *apiStats) stats(name string) (Stats, error) {
	s := Stats{API: name, Count: a.count, Errors: a.errors}
	if len(a.status) > 0 {
		s.Status = make(map[string]int64, len(a.status))
		for k, v := range a.status {
			s.Status[statusKey(k)] = v
		}
	}
	return s, FillStats(&s, a.hist, true)
}

// recorder accumulates outcomes; one mutex covers the per-API maps and the
// open second of the time series because every completion updates both.
type recorder struct {
	mu    sync.Mutex
	total *apiStats
	apis  map[string]*apiStats

	sec     int64 // Unix second of the open time-series line; 0 before the first event
	secHist *hdr.Histogram
	// sends counts sends since the last closed second without taking mu;
	// closing a second takes it as that second's "sent". A close happens at
	// the first completion after the second ends, so a send is attributed
	// to the second in which it happened, give or take that moment.
	sends     atomic.Int64
	secCount  int64
	secErrors int64
	ts        *json.Encoder // nil: no time series
	tsErr     error

	errMu  sync.Mutex
	errW   *Writer // nil: errors are not written
	errErr error
	shard  string
}

func newRecorder(ts, errs io.Writer, shard string) *recorder {
	r := &recorder{total: newAPIStats(), apis: map[string]*apiStats{}, secHist: NewHistogram(), shard: shard}
	if ts != nil {
		r.ts = json.NewEncoder(ts)
	}
	if errs != nil {
		r.errW = NewWriter(errs)
	}
	return r
}

// sent counts a send in the time series.
func (r *recorder) sent() { r.sends.Add(1) }

// done records a completed request: latency d from its intended time.
func (r *recorder) done(api string, now time.Time, d time.Duration, o Outcome) {
	r.mu.Lock()
	a := r.apis[api]
	if a == nil {
		if len(r.apis) >= MaxAPIs {
			api = OtherAPI
			a = r.apis[api]
		}
		if a == nil {
			a = newAPIStats()
			r.apis[api] = a
		}
	}
	a.add(d, o)
	r.total.add(d, o)
	r.advance(now.Unix())
	recordLatency(r.secHist, d)
	r.secCount++
	if o.Err != nil {
		r.secErrors++
	}
	r.mu.Unlock()
}

// advance closes the open second when sec is later, writing it and an empty
// line for every second without events in between. A completion that took
// the lock after a later one lands in the later second: off by at most the
// time spent waiting for the lock.
func (r *recorder) advance(sec int64) {
	if r.sec == 0 {
		r.sec = sec
		return
	}
	for r.sec < sec {
		r.flushSecond()
		r.sec++
	}
}

func (r *recorder) flushSecond() {
	if r.ts != nil && r.tsErr == nil {
		line := Second{V: ResultsVersion, T: r.sec, Sent: r.sends.Swap(0), Count: r.secCount, Errors: r.secErrors}
		if r.secCount > 0 {
			line.P50Ms = Millis(r.secHist.ValueAtQuantile(50))
			line.P99Ms = Millis(r.secHist.ValueAtQuantile(99))
			line.MaxMs = Millis(r.secHist.Max())
			line.Hist, r.tsErr = EncodeHistogram(r.secHist)
		}
		if r.tsErr == nil {
			r.tsErr = r.ts.Encode(line)
		}
	}
	r.secHist.Reset()
	r.secCount, r.secErrors = 0, 0
}

// failed writes a failed request to errors.jsonl.
func (r *recorder) failed(req *Request, sentAt time.Time, d time.Duration, o Outcome) {
	if r.errW == nil {
		return
	}
	w := req.wire()
	w.Error = o.Err.Error()
	if o.Status >= grpcOutcome {
		w.GRPCStatus = strconv.Itoa(o.Status - grpcOutcome)
	} else {
		w.Status = o.Status
	}
	w.SentAt = sentAt
	w.LatencyMs = float64(d) / float64(time.Millisecond)
	w.Shard = r.shard
	r.errMu.Lock()
	if r.errErr == nil {
		r.errErr = r.errW.writeWire(w)
	}
	r.errMu.Unlock()
}

// p99 is the live 99th percentile over everything recorded so far.
func (r *recorder) p99() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total.count == 0 {
		return 0
	}
	return time.Duration(r.total.hist.ValueAtQuantile(99)) * time.Microsecond
}

// finish closes the open second, flushes the writers and fills res.
func (r *recorder) finish(res *Results) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sec != 0 {
		r.flushSecond()
	}
	var err error
	if res.Total, err = r.total.stats("total"); err != nil {
		return err
	}
	names := make([]string, 0, len(r.apis))
	for n := range r.apis {
		names = append(names, n)
	}
	sort.Strings(names)
	res.APIs = make([]Stats, 0, len(names))
	for _, n := range names {
		s, err := r.apis[n].stats(n)
		if err != nil {
			return err
		}
		res.APIs = append(res.APIs, s)
	}
	if r.tsErr != nil {
		return fmt.Errorf("writing %s: %w", TimeseriesFile, r.tsErr)
	}
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.errW != nil && r.errErr == nil {
		r.errErr = r.errW.Flush()
	}
	if r.errErr != nil {
		return fmt.Errorf("writing %s: %w", ErrorsFile, r.errErr)
	}
	return nil
}

// WriteResults writes res as indented JSON.
func WriteResults(w io.Writer, res *Results) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(res)
}

// ReadResults decodes a results.json.
func ReadResults(r io.Reader, name string) (*Results, error) {
	var res Results
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if res.V != ResultsVersion {
		return nil, fmt.Errorf("%s: unsupported results version %d (want %d)", name, res.V, ResultsVersion)
	}
	return &res, nil
}

// statusKey names an outcome's status in results: the HTTP status, or
// "grpc-<code>" for a gRPC answer.
func statusKey(st int) string {
	if st >= grpcOutcome {
		return "grpc-" + strconv.Itoa(st-grpcOutcome)
	}
	return strconv.Itoa(st)
}
