package analyze

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is what analyze prints: one run, or a baseline and a candidate
// with their comparison, and the thresholds crossed.
type Report struct {
	Summary    *Summary
	Candidate  *Summary    // nil unless comparing
	Comparison *Comparison // nil unless comparing
	Violations []Violation

	base, cand *Run
}

// NewReport summarises base (and compares cand with it when not nil) and
// checks th.
func NewReport(base, cand *Run, th Thresholds) *Report {
	r := &Report{Summary: Summarize(base), base: base, cand: cand}
	checked := r.Summary
	if cand != nil {
		r.Candidate = Summarize(cand)
		r.Comparison = Compare(r.Summary, r.Candidate)
		checked = r.Candidate
	}
	r.Violations = Check(checked, r.Comparison, th)
	if r.Violations == nil {
		r.Violations = []Violation{}
	}
	return r
}

// WriteJSON writes the report as one JSON object: the (baseline) summary's
// fields at the top ({"total":{…},"apis":[{"api":"GET /path",…}],…}), and
// "candidate", "comparison" and "violations".
func (r *Report) WriteJSON(w io.Writer) error {
	out := struct {
		*Summary
		Candidate  *Summary    `json:"candidate,omitempty"`
		Comparison *Comparison `json:"comparison,omitempty"`
		Violations []Violation `json:"violations"`
	}{r.Summary, r.Candidate, r.Comparison, r.Violations}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// WriteText writes the report as aligned tables for a terminal.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	if r.Candidate == nil {
		writeRunHeader(&b, "run", r.Summary)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "api\tcount\terrors\terr%\trate/s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\t")
		row := func(e *Entry) {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", e.API, e.Count, e.Errors, e.ErrorRate*100, e.Rate,
				num(e.P50Ms), num(e.P90Ms), num(e.P99Ms), num(e.P999Ms), num(e.MaxMs))
		}
		row(&r.Summary.Total)
		for i := range r.Summary.APIs {
			row(&r.Summary.APIs[i])
		}
		tw.Flush()
	} else {
		writeRunHeader(&b, "baseline", r.Summary)
		writeRunHeader(&b, "candidate", r.Candidate)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "api\tcount\terr%\tp50 ms\t\tp90 ms\t\tp99 ms\t\tmax ms\t\t")
		row := func(d *Delta) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", d.API,
				pair(d, func(e *Entry) string { return fmt.Sprint(e.Count) }),
				pair(d, func(e *Entry) string { return fmt.Sprintf("%.2f", e.ErrorRate*100) }),
				pair(d, func(e *Entry) string { return num(e.P50Ms) }), pct(d, d.P50Change),
				pair(d, func(e *Entry) string { return num(e.P90Ms) }), pct(d, d.P90Change),
				pair(d, func(e *Entry) string { return num(e.P99Ms) }), pct(d, d.P99Change),
				pair(d, func(e *Entry) string { return num(e.MaxMs) }), pct(d, d.MaxChange))
		}
		row(&r.Comparison.Total)
		for i := range r.Comparison.APIs {
			row(&r.Comparison.APIs[i])
		}
		tw.Flush()
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(&b, "\n%d threshold(s) crossed:\n", len(r.Violations))
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRunHeader(b *strings.Builder, label string, s *Summary) {
	fmt.Fprintf(b, "%s: %s — %d shard(s), %.1fs, %d sent, achieved %.1f req/s", label, s.Run, s.Shards, s.DurationS, s.Sent, s.Total.Rate)
	if s.Late > 0 {
		fmt.Fprintf(b, ", %d sent late (generator behind its schedule)", s.Late)
	}
	if s.BadLines > 0 {
		fmt.Fprintf(b, ", %d bad input lines", s.BadLines)
	}
	b.WriteString("\n")
	if len(s.Missing) > 0 {
		fmt.Fprintf(b, "  warning: shards missing: %s\n", strings.Join(s.Missing, ", "))
	}
	if len(s.Incomplete) > 0 {
		fmt.Fprintf(b, "  warning: shards interrupted (results cover part of their input): %s\n", strings.Join(s.Incomplete, ", "))
	}
}

func pair(d *Delta, f func(*Entry) string) string {
	b, c := "-", "-"
	if d.Baseline != nil {
		b = f(d.Baseline)
	}
	if d.Candidate != nil {
		c = f(d.Candidate)
	}
	return b + " → " + c
}

func pct(d *Delta, ch float64) string {
	if d.Baseline == nil || d.Candidate == nil {
		return ""
	}
	return fmt.Sprintf("(%+.1f%%)", ch*100)
}

// num formats milliseconds with 3 significant digits, like the histograms.
func num(ms float64) string {
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.2f", ms)
	}
}
