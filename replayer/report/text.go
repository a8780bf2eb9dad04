package report

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// WriteText writes the terminal summary: totals, a line per API, the
// first failing and errored sessions.
func WriteText(w io.Writer, s *Summary) {
	mode := "target " + s.Target
	if s.Mode == "ab" {
		mode = fmt.Sprintf("candidate %s, baseline %s", s.Target, s.Baseline)
	}
	fmt.Fprintf(w, "replayed %d sessions against %s in %.1fs (%.1f/s): %d passed, %d failed, %d errors\n",
		s.Sessions, mode, s.Seconds, s.Rate, s.Passed, s.Failed, s.Errors)
	if !s.Complete {
		fmt.Fprintf(w, "INCOMPLETE: %s; the counts cover the sessions replayed until then\n", s.Incomplete)
	}
	for _, d := range s.Destinations {
		to := d.Recorded
		if to == "" {
			to = "nothing (every call a missing mock)"
		}
		fmt.Fprintf(w, "destination %s answered as %s (%s) %s\n", d.Live, to, d.How, d.Reason)
	}
	if s.Mode == "ab" && s.Preexisting > 0 {
		fmt.Fprintf(w, "%d sessions have differences the baseline shows too (not counted as failures)\n", s.Preexisting)
	}
	if len(s.APIs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "API\tsessions\tpassed\tfailed\terrors\t")
		for _, a := range s.APIs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", a.API, a.Sessions, a.Passed, a.Failed, a.Errors)
		}
		tw.Flush()
	}
	for _, a := range s.APIs {
		if len(a.Paths) == 0 {
			continue
		}
		var ps []string
		for _, p := range a.Paths {
			ps = append(ps, fmt.Sprintf("%s (%d)", p.Path, p.Sessions))
		}
		fmt.Fprintf(w, "%s differs at: %s\n", a.API, strings.Join(ps, ", "))
	}
	const shown = 10
	for i, f := range s.FailedSessions {
		if i == shown {
			fmt.Fprintf(w, "  … and %d more failed sessions\n", s.Failed-shown)
			break
		}
		fmt.Fprintf(w, "FAIL %s %s: %s\n", f.Session, f.API, strings.Join(f.Paths, ", "))
	}
	for i, e := range s.ErrorSessions {
		if i == shown {
			fmt.Fprintf(w, "  … and %d more errors\n", s.Errors-shown)
			break
		}
		fmt.Fprintf(w, "ERROR %s %s: %s\n", e.Session, e.API, e.Error)
	}
}

// Progress draws a one-line progress bar on a terminal, at most ten times
// a second. Safe for concurrent use.
type Progress struct {
	w     io.Writer
	total int // 0 when unknown

	mu    sync.Mutex
	start time.Time
	last  time.Time
}

// NewProgress returns a progress bar for total items (0: unknown).
func NewProgress(w io.Writer, total int) *Progress {
	return &Progress{w: w, total: total, start: time.Now()}
}

// Update redraws the bar when enough time has passed; c is
// Report.Counts.
func (p *Progress) Update(c Counts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.draw(c)
}

func (p *Progress) draw(s Counts) {
	const width = 30
	rate := float64(s.Sessions) / time.Since(p.start).Seconds()
	if p.total > 0 {
		done := min(width, width*s.Sessions/p.total)
		fmt.Fprintf(p.w, "\r[%s%s] %d/%d  failed %d  errors %d  %.0f/s ", strings.Repeat("#", done), strings.Repeat("-", width-done),
			s.Sessions, p.total, s.Failed, s.Errors, rate)
		return
	}
	fmt.Fprintf(p.w, "\r%d sessions  failed %d  errors %d  %.0f/s ", s.Sessions, s.Failed, s.Errors, rate)
}

// Done draws the final state and ends the line.
func (p *Progress) Done(s Counts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(s)
	fmt.Fprintln(p.w)
}
