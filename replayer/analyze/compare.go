package analyze

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Thresholds are the limits of a CI gate. A negative (or zero, for
// durations) limit is not checked.
type Thresholds struct {
	// MaxP50Increase and MaxP99Increase bound the relative increase of the
	// candidate's percentile over the baseline's (0.1 = +10%). Compare mode.
	MaxP50Increase, MaxP99Increase float64
	// MaxErrorRate bounds the error rate (0.01 = 1%) of the run, or of the
	// candidate in compare mode.
	MaxErrorRate float64
	// MaxP99 bounds the run's (the candidate's) p99.
	MaxP99 time.Duration
	// MinCount is how many requests an API needs in both runs for its own
	// limits to be checked (the total is always checked): a p99 of 3
	// requests says nothing. Zero means 20.
	MinCount int64
	// MaxCountDecrease bounds how many fewer requests the candidate may
	// have sent than the baseline (0.1 = 10% fewer). Compare mode; negative
	// is not checked.
	MaxCountDecrease float64
}

// NoThresholds checks nothing but what is always checked: a run (or
// candidate) with no requests, a candidate missing an API of the baseline,
// and runs cut short.
func NoThresholds() Thresholds {
	return Thresholds{MaxP50Increase: -1, MaxP99Increase: -1, MaxErrorRate: -1, MaxCountDecrease: -1}
}

// ParsePercent parses "10%" (→ 0.1) or a plain fraction ("0.1").
func ParsePercent(s string) (float64, error) {
	t := strings.TrimSpace(s)
	div := 1.0
	if strings.HasSuffix(t, "%") {
		t, div = strings.TrimSuffix(t, "%"), 100
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("bad percentage %q (want e.g. 10%% or 0.1)", s)
	}
	return f / div, nil
}

// Violation is a crossed threshold.
type Violation struct {
	API string `json:"api"`
	// Metric is "p50_increase", "p99_increase", "error_rate", "p99_ms",
	// "count_decrease" (Value and Limit fractions), or one of the checks
	// that need no threshold: "no_requests" (the run has none),
	// "missing_api" (Value is the baseline's count of an API the
	// candidate never sent), "incomplete" (Value is the number of shards
	// interrupted or missing).
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
}

func (v Violation) String() string {
	switch v.Metric {
	case "no_requests":
		return fmt.Sprintf("%s: no request was sent", v.API)
	case "missing_api":
		return fmt.Sprintf("%s: the candidate sent none (baseline: %.0f)", v.API, v.Value)
	case "incomplete":
		return fmt.Sprintf("%s: %.0f shard(s) interrupted or missing", v.API, v.Value)
	case "count_decrease":
		return fmt.Sprintf("%s: %.1f%% fewer requests than the baseline, more than %.1f%%", v.API, v.Value*100, v.Limit*100)
	case "p99_ms":
		return fmt.Sprintf("%s: p99 %.1fms exceeds %.1fms", v.API, v.Value, v.Limit)
	case "error_rate":
		return fmt.Sprintf("%s: error rate %.2f%% exceeds %.2f%%", v.API, v.Value*100, v.Limit*100)
	default:
		return fmt.Sprintf("%s: %s %+.1f%% exceeds +%.1f%%", v.API, strings.Replace(v.Metric, "_increase", "", 1), v.Value*100, v.Limit*100)
	}
}

// Delta is one API of a comparison: baseline, candidate and relative
// changes (candidate/baseline − 1; 0 when the baseline is 0).
type Delta struct {
	API       string  `json:"api"`
	Baseline  *Entry  `json:"baseline,omitempty"`  // nil: the API is only in the candidate
	Candidate *Entry  `json:"candidate,omitempty"` // nil: only in the baseline
	P50Change float64 `json:"p50_change"`
	P90Change float64 `json:"p90_change"`
	P99Change float64 `json:"p99_change"`
	MaxChange float64 `json:"max_change"`
	RateDelta float64 `json:"rate_change"`
}

func change(b, c float64) float64 {
	if b == 0 {
		return 0
	}
	return c/b - 1
}

func delta(api string, b, c *Entry) Delta {
	d := Delta{API: api, Baseline: b, Candidate: c}
	if b != nil && c != nil {
		d.P50Change = change(b.P50Ms, c.P50Ms)
		d.P90Change = change(b.P90Ms, c.P90Ms)
		d.P99Change = change(b.P99Ms, c.P99Ms)
		d.MaxChange = change(b.MaxMs, c.MaxMs)
		d.RateDelta = change(b.Rate, c.Rate)
	}
	return d
}

// Comparison puts a candidate run beside a baseline.
type Comparison struct {
	Total Delta   `json:"total"`
	APIs  []Delta `json:"apis"` // in the baseline's order, then the candidate's new APIs
}

// Compare computes the deltas of cand against base.
func Compare(base, cand *Summary) *Comparison {
	c := &Comparison{Total: delta("total", &base.Total, &cand.Total)}
	byName := map[string]*Entry{}
	for i := range cand.APIs {
		byName[cand.APIs[i].API] = &cand.APIs[i]
	}
	done := map[string]bool{}
	for i := range base.APIs {
		b := &base.APIs[i]
		c.APIs = append(c.APIs, delta(b.API, b, byName[b.API]))
		done[b.API] = true
	}
	for i := range cand.APIs {
		if e := &cand.APIs[i]; !done[e.API] {
			c.APIs = append(c.APIs, delta(e.API, nil, e))
		}
	}
	return c
}

// Check returns the thresholds th crossed by run (when cmp is nil) or by the
// candidate of cmp.
func Check(run *Summary, cmp *Comparison, th Thresholds) []Violation {
	minCount := th.MinCount
	if minCount == 0 {
		minCount = 20
	}
	var out []Violation
	absolute := func(e *Entry) {
		if th.MaxErrorRate >= 0 && e.ErrorRate > th.MaxErrorRate {
			out = append(out, Violation{e.API, "error_rate", e.ErrorRate, th.MaxErrorRate})
		}
		if th.MaxP99 > 0 && e.P99Ms > ms(th.MaxP99) {
			out = append(out, Violation{e.API, "p99_ms", e.P99Ms, ms(th.MaxP99)})
		}
	}
	relative := func(d *Delta) {
		if d.Baseline == nil || d.Candidate == nil {
			return
		}
		if th.MaxP50Increase >= 0 && d.P50Change > th.MaxP50Increase {
			out = append(out, Violation{d.API, "p50_increase", d.P50Change, th.MaxP50Increase})
		}
		if th.MaxP99Increase >= 0 && d.P99Change > th.MaxP99Increase {
			out = append(out, Violation{d.API, "p99_increase", d.P99Change, th.MaxP99Increase})
		}
	}
	if run.Total.Count == 0 && run.Sent == 0 {
		out = append(out, Violation{"total", "no_requests", 0, 0})
	}
	if n := len(run.Missing) + len(run.Incomplete); n > 0 {
		out = append(out, Violation{"total", "incomplete", float64(n), 0})
	}
	absolute(&run.Total)
	for i := range run.APIs {
		if run.APIs[i].Count >= minCount {
			absolute(&run.APIs[i])
		}
	}
	if cmp != nil {
		if b := cmp.Total.Baseline; b != nil && b.Count == 0 {
			out = append(out, Violation{"baseline", "no_requests", 0, 0})
		}
		if b, c := cmp.Total.Baseline, cmp.Total.Candidate; th.MaxCountDecrease >= 0 && b != nil && c != nil && b.Count > 0 {
			if dec := 1 - float64(c.Count)/float64(b.Count); dec > th.MaxCountDecrease {
				out = append(out, Violation{"total", "count_decrease", dec, th.MaxCountDecrease})
			}
		}
		for i := range cmp.APIs {
			if d := &cmp.APIs[i]; d.Baseline != nil && d.Baseline.Count > 0 && (d.Candidate == nil || d.Candidate.Count == 0) {
				out = append(out, Violation{d.API, "missing_api", float64(d.Baseline.Count), 0})
			}
		}
		relative(&cmp.Total)
		for i := range cmp.APIs {
			d := &cmp.APIs[i]
			if d.Baseline != nil && d.Candidate != nil && d.Baseline.Count >= minCount && d.Candidate.Count >= minCount {
				relative(d)
			}
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
