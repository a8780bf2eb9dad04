// Package analyze is the last step of the load pipeline: it merges the
// results of every shard of a run exactly (HDR histograms, never averages of
// percentiles), summarises them in total and per API (count, errors, error
// rate, achieved rate, P50/P90/P99/P99.9/Max), compares two runs of the same
// traffic (V1 against V2) with thresholds for a CI gate, and writes the
// summary as text, JSON or a self-contained HTML page with plots.
package analyze

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/retrace-dev/retrace/replayer/load"
	"github.com/retrace-dev/retrace/replayer/objstore"
)

// Run is the merged results of one load test: every shard found under the
// directories it was loaded from.
type Run struct {
	Name    string   // the directories, joined by ", "
	Shards  []string // results files merged, "DIR/shard-0-of-2/results.json"
	Missing []string // shards "I/N" absent from a sharded run
	// Incomplete lists the shards ("I/N") whose run was cut short
	// (load.Results.Incomplete).
	Incomplete []string
	Started    time.Time
	Ended      time.Time
	Sent       int64
	Late       int64
	BadLines   int64
	Total      *Merged
	APIs       map[string]*Merged
	Seconds    []Second // sorted by T
}

// Merged is the exact merge of one API's (or all) shard histograms.
type Merged struct {
	Count, Errors int64
	Status        map[string]int64
	Hist          *hdr.Histogram
}

// Second is the merged time-series line of one wall-clock second.
type Second struct {
	T                   int64
	Sent, Count, Errors int64
	Hist                *hdr.Histogram
}

func newMerged() *Merged {
	return &Merged{Hist: load.NewHistogram(), Status: map[string]int64{}}
}

func (m *Merged) add(s load.Stats, src string) error {
	h, err := load.DecodeHistogram(s.Hist)
	if err != nil {
		return fmt.Errorf("%s: api %q: %w", src, s.API, err)
	}
	if h.TotalCount() != s.Count {
		return fmt.Errorf("%s: api %q: histogram holds %d latencies, count says %d", src, s.API, h.TotalCount(), s.Count)
	}
	m.Hist.Merge(h) // same geometry: exact, nothing dropped
	m.Count += s.Count
	m.Errors += s.Errors
	for k, v := range s.Status {
		m.Status[k] += v
	}
	return nil
}

// Load reads and merges every results.json (and the timeseries.jsonl beside
// it) found under the locations, which are directories or bucket URLs of one
// run — the output directory of all shards, or the shard directories.
func Load(ctx context.Context, locs ...string) (*Run, error) {
	if len(locs) == 0 {
		return nil, errors.New("no result directories given")
	}
	run := &Run{Name: strings.Join(locs, ", "), Total: newMerged(), APIs: map[string]*Merged{}}
	seconds := map[int64]*Second{}
	seen := map[string]string{} // shard "I/N" → file
	counts := map[int]bool{}
	for _, loc := range locs {
		if err := run.loadDir(ctx, loc, seen, counts, seconds); err != nil {
			return nil, err
		}
	}
	if len(run.Shards) == 0 {
		return nil, fmt.Errorf("no %s found under %s", load.ResultsFile, run.Name)
	}
	if len(counts) > 1 {
		return nil, fmt.Errorf("%s mixes runs of different shard counts (%v)", run.Name, keys(counts))
	}
	for n := range counts {
		for i := 0; i < n; i++ {
			s := load.Shard{Index: i, Count: n}.String()
			if _, ok := seen[s]; !ok {
				run.Missing = append(run.Missing, s)
			}
		}
	}
	for _, s := range seconds {
		run.Seconds = append(run.Seconds, *s)
	}
	sort.Slice(run.Seconds, func(i, j int) bool { return run.Seconds[i].T < run.Seconds[j].T })
	return run, nil
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func (run *Run) loadDir(ctx context.Context, loc string, seen map[string]string, counts map[int]bool, seconds map[int64]*Second) error {
	dir, err := objstore.OpenDir(ctx, loc)
	if err != nil {
		return err
	}
	defer dir.Close()
	names, err := dir.List(ctx)
	if err != nil {
		return fmt.Errorf("listing %s: %w", loc, err)
	}
	for _, name := range names {
		if path.Base(name) != load.ResultsFile {
			continue
		}
		src := dir.Path(name)
		res, err := readResults(ctx, dir, name, src)
		if err != nil {
			return err
		}
		if prev, dup := seen[res.Shard]; dup {
			return fmt.Errorf("shard %s appears twice: %s and %s (merging would count it twice)", res.Shard, prev, src)
		}
		sh, err := load.ParseShard(res.Shard)
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		seen[res.Shard] = src
		counts[sh.Count] = true
		run.Shards = append(run.Shards, src)
		if err := run.addResults(res, src); err != nil {
			return err
		}
		tsName := path.Join(path.Dir(name), load.TimeseriesFile)
		if err := readSeconds(ctx, dir, tsName, seconds); err != nil {
			return err
		}
	}
	return nil
}

func readResults(ctx context.Context, dir *objstore.Dir, name, src string) (*load.Results, error) {
	r, err := dir.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return load.ReadResults(r, src)
}

func (run *Run) addResults(res *load.Results, src string) error {
	if run.Started.IsZero() || res.Started.Before(run.Started) {
		run.Started = res.Started
	}
	if res.Ended.After(run.Ended) {
		run.Ended = res.Ended
	}
	run.Sent += res.Sent
	run.Late += res.Late
	run.BadLines += res.BadLines
	if res.Incomplete != "" {
		run.Incomplete = append(run.Incomplete, res.Shard)
	}
	if err := run.Total.add(res.Total, src); err != nil {
		return err
	}
	for _, s := range res.APIs {
		m := run.APIs[s.API]
		if m == nil {
			m = newMerged()
			run.APIs[s.API] = m
		}
		if err := m.add(s, src); err != nil {
			return err
		}
	}
	return nil
}

// readSeconds merges a timeseries.jsonl; a missing file is no error (a run
// written without one), a bad line is.
func readSeconds(ctx context.Context, dir *objstore.Dir, name string, seconds map[int64]*Second) error {
	r, err := dir.Open(ctx, name)
	if err != nil {
		return nil
	}
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var s load.Second
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return fmt.Errorf("%s:%d: %w", dir.Path(name), line, err)
		}
		h, err := load.DecodeHistogram(s.Hist)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", dir.Path(name), line, err)
		}
		m := seconds[s.T]
		if m == nil {
			m = &Second{T: s.T, Hist: load.NewHistogram()}
			seconds[s.T] = m
		}
		m.Sent += s.Sent
		m.Count += s.Count
		m.Errors += s.Errors
		m.Hist.Merge(h)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", dir.Path(name), err)
	}
	return nil
}

// Duration is the span of the run: from the earliest shard start to the
// last answer.
func (run *Run) Duration() time.Duration { return run.Ended.Sub(run.Started) }

// Entry is one row of a summary: all requests ("total") or one API. The
// JSON keys are a contract (DESIGN.md 3.5).
type Entry struct {
	API       string           `json:"api"`
	Count     int64            `json:"count"`
	Errors    int64            `json:"errors"`
	ErrorRate float64          `json:"error_rate"` // errors / count, 0..1
	Rate      float64          `json:"rate"`       // achieved requests per second
	P50Ms     float64          `json:"p50_ms"`
	P90Ms     float64          `json:"p90_ms"`
	P99Ms     float64          `json:"p99_ms"`
	P999Ms    float64          `json:"p999_ms"`
	MaxMs     float64          `json:"max_ms"`
	MeanMs    float64          `json:"mean_ms"`
	Status    map[string]int64 `json:"status,omitempty"`
}

// Summary is what analyze prints for one run.
type Summary struct {
	Run     string   `json:"run"`
	Shards  int      `json:"shards"`
	Missing []string `json:"missing_shards,omitempty"`
	// Incomplete lists shards whose run was interrupted.
	Incomplete []string `json:"incomplete_shards,omitempty"`
	Started    string   `json:"started"`
	DurationS  float64  `json:"duration_s"`
	Sent       int64    `json:"sent"`
	Late       int64    `json:"late"`
	BadLines   int64    `json:"bad_lines"`
	Total      Entry    `json:"total"`
	APIs       []Entry  `json:"apis"` // by count, descending
}

func entry(api string, m *Merged, secs float64) Entry {
	e := Entry{API: api, Count: m.Count, Errors: m.Errors}
	if len(m.Status) > 0 {
		e.Status = m.Status
	}
	if m.Count > 0 {
		e.ErrorRate = float64(m.Errors) / float64(m.Count)
		var s load.Stats
		_ = load.FillStats(&s, m.Hist, false) // no encoding: no error
		e.P50Ms, e.P90Ms, e.P99Ms, e.P999Ms, e.MaxMs, e.MeanMs = s.P50Ms, s.P90Ms, s.P99Ms, s.P999Ms, s.MaxMs, s.MeanMs
	}
	if secs > 0 {
		e.Rate = float64(m.Count) / secs
	}
	return e
}

// Summarize computes the summary of run.
func Summarize(run *Run) *Summary {
	secs := run.Duration().Seconds()
	s := &Summary{Run: run.Name, Shards: len(run.Shards), Missing: run.Missing, Incomplete: run.Incomplete, Started: run.Started.UTC().Format(time.RFC3339),
		DurationS: secs, Sent: run.Sent, Late: run.Late, BadLines: run.BadLines, Total: entry("total", run.Total, secs),
		APIs: []Entry{}}
	for name, m := range run.APIs {
		s.APIs = append(s.APIs, entry(name, m, secs))
	}
	sort.Slice(s.APIs, func(i, j int) bool {
		if s.APIs[i].Count != s.APIs[j].Count {
			return s.APIs[i].Count > s.APIs[j].Count
		}
		return s.APIs[i].API < s.APIs[j].API
	})
	return s
}
