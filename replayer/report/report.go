package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
)

// Files written into the report directory.
const (
	SummaryFile  = "summary.json"
	JUnitFile    = "junit.xml"
	HTMLFile     = "report.html"
	SessionsFile = "sessions.jsonl"
)

// Limits that keep a report's memory flat in the number of sessions.
const (
	DefaultMaxDetails = 100  // failing sessions shown with full evidence in the HTML report
	maxRefs           = 1000 // failed and errored session ids listed in summary.json
	maxAPIs           = 1000 // APIs tallied separately; the rest count as "(other APIs)"
	maxPathsPerAPI    = 50   // distinct differing paths counted per API
)

// Options configures a Report.
type Options struct {
	// Dir is where the files go; created if missing. Empty: no files.
	Dir string
	// MaxDetails bounds the failing sessions kept with full evidence.
	// Zero: DefaultMaxDetails.
	MaxDetails int
	// Target and Baseline are shown in the report; a Baseline marks A/B
	// mode.
	Target, Baseline string
	// NoiseRules are the rules noise detection added, listed in the
	// report.
	NoiseRules []diff.Rule
}

// Summary is the content of summary.json (DESIGN.md 3.5: at least
// sessions, passed, failed, errors).
type Summary struct {
	// Complete is false when the run stopped before every selected
	// session was replayed (interrupted, or its recordings could not be
	// read to the end); Incomplete then says why.
	Complete   bool   `json:"complete"`
	Incomplete string `json:"incomplete,omitempty"`
	Sessions   int    `json:"sessions"`
	Passed     int    `json:"passed"`
	Failed     int    `json:"failed"`
	Errors     int    `json:"errors"`
	// Preexisting counts sessions with differences the baseline shows too
	// (A/B mode); they are not failures.
	Preexisting int          `json:"preexisting,omitempty"`
	Mode        string       `json:"mode"` // "regression" or "ab"
	Target      string       `json:"target,omitempty"`
	Baseline    string       `json:"baseline,omitempty"`
	Started     time.Time    `json:"started"`
	Seconds     float64      `json:"seconds"`
	Rate        float64      `json:"sessions_per_second"`
	NoiseRules  int          `json:"noise_rules,omitempty"`
	APIs        []APISummary `json:"apis"`
	// FailedSessions and ErrorSessions list up to 1000 sessions each;
	// sessions.jsonl has all of them.
	FailedSessions []SessionRef `json:"failed_sessions,omitempty"`
	ErrorSessions  []SessionRef `json:"error_sessions,omitempty"`
	// DetailsShown is how many failing sessions the HTML report shows in
	// full.
	DetailsShown int `json:"details_shown"`
	// Destinations are the mock server's decisions for live destinations
	// no recording named as they were dialled (mapped or matched
	// automatically: replay in another environment).
	Destinations []mockserver.DestDecision `json:"destinations,omitempty"`
}

// APISummary is the tally of one API.
type APISummary struct {
	API      string      `json:"api"`
	Sessions int         `json:"sessions"`
	Passed   int         `json:"passed"`
	Failed   int         `json:"failed"`
	Errors   int         `json:"errors"`
	Paths    []PathCount `json:"paths,omitempty"` // most frequent differing paths
}

// PathCount is how many failing sessions of an API differ at a path.
type PathCount struct {
	Path     string `json:"path"`
	Sessions int    `json:"sessions"`
}

// SessionRef names one failed or errored session.
type SessionRef struct {
	Session string   `json:"session"`
	API     string   `json:"api"`
	Trace   string   `json:"trace,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	Error   string   `json:"error,omitempty"`
}

type apiTally struct {
	APISummary
	paths map[string]int
}

// Report aggregates results as they arrive and writes the report files.
// Add is not safe for concurrent use: regress.Run calls its callback on
// one goroutine.
type Report struct {
	opt     Options
	started time.Time
	sum     Summary
	apis    map[string]*apiTally
	details []*regress.Result
	err     error // first write error of the streamed files

	sessions *os.File // sessions.jsonl, written as results arrive
	sessW    *bufio.Writer
	cases    *os.File // JUnit test cases, assembled at Close
	casesW   *bufio.Writer
}

// New starts a report.
func New(opt Options) (*Report, error) {
	if opt.MaxDetails <= 0 {
		opt.MaxDetails = DefaultMaxDetails
	}
	r := &Report{opt: opt, started: time.Now(), apis: map[string]*apiTally{}}
	r.sum.Mode = "regression"
	if opt.Baseline != "" {
		r.sum.Mode = "ab"
	}
	r.sum.Target, r.sum.Baseline, r.sum.NoiseRules = opt.Target, opt.Baseline, len(opt.NoiseRules)
	if opt.Dir == "" {
		return r, nil
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("report directory: %w", err)
	}
	var err error
	if r.sessions, err = os.Create(filepath.Join(opt.Dir, SessionsFile)); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if r.cases, err = os.CreateTemp(opt.Dir, ".junit-cases-*"); err != nil {
		r.sessions.Close()
		return nil, fmt.Errorf("report: %w", err)
	}
	r.sessW, r.casesW = bufio.NewWriter(r.sessions), bufio.NewWriter(r.cases)
	return r, nil
}

// sessionLine is one line of sessions.jsonl.
type sessionLine struct {
	Session     string            `json:"session"`
	Replay      int               `json:"replay,omitempty"`
	API         string            `json:"api"`
	Status      regress.Status    `json:"status"`
	Trace       string            `json:"trace,omitempty"`
	Ms          float64           `json:"ms"`
	Error       string            `json:"error,omitempty"`
	Findings    []regress.Finding `json:"findings,omitempty"`
	Preexisting []regress.Finding `json:"preexisting,omitempty"`
}

// Add counts one result.
func (r *Report) Add(res *regress.Result) {
	s := &r.sum
	s.Sessions++
	api := r.api(res.API)
	api.Sessions++
	switch res.Status {
	case regress.Passed:
		s.Passed++
		api.Passed++
	case regress.Failed:
		s.Failed++
		api.Failed++
		seen := map[string]bool{}
		for _, f := range res.Findings {
			p := pathKey(f)
			if seen[p] {
				continue
			}
			seen[p] = true
			if _, ok := api.paths[p]; ok || len(api.paths) < maxPathsPerAPI {
				api.paths[p]++
			}
		}
		if len(s.FailedSessions) < maxRefs {
			s.FailedSessions = append(s.FailedSessions, SessionRef{Session: res.Name(), API: res.API, Trace: res.Trace, Paths: labels(res.Findings, 10)})
		}
	default:
		s.Errors++
		api.Errors++
		if len(s.ErrorSessions) < maxRefs {
			s.ErrorSessions = append(s.ErrorSessions, SessionRef{Session: res.Name(), API: res.API, Trace: res.Trace, Error: res.Error})
		}
	}
	if len(res.Preexisting) > 0 {
		s.Preexisting++
	}
	if res.Status == regress.Failed && len(r.details) < r.opt.MaxDetails {
		r.details = append(r.details, res)
	}
	if r.sessW != nil && r.err == nil {
		line := sessionLine{Session: res.Session, Replay: res.Replay, API: res.API, Status: res.Status, Trace: res.Trace,
			Ms: float64(res.Elapsed.Microseconds()) / 1000, Error: res.Error,
			Findings: capFindings(res.Findings), Preexisting: capFindings(res.Preexisting)}
		b, err := json.Marshal(line)
		if err == nil {
			b = append(b, '\n')
			_, err = r.sessW.Write(b)
		}
		if err == nil {
			err = writeCase(r.casesW, res)
		}
		r.err = err
	}
}

// pathKey names where a finding is, the same for every session of an API:
// no call numbers, no array indices.
func pathKey(f regress.Finding) string {
	if f.Call == nil {
		return diff.Generalize(f.Path)
	}
	return "downstream " + f.Call.Proto + " " + f.Call.Dst + ": " + diff.Generalize(f.Path)
}

func capFindings(fs []regress.Finding) []regress.Finding {
	if len(fs) > 20 {
		return fs[:20]
	}
	return fs
}

func labels(fs []regress.Finding, n int) []string {
	var out []string
	for _, f := range fs {
		if len(out) == n {
			out = append(out, fmt.Sprintf("… %d more", len(fs)-n))
			break
		}
		out = append(out, f.Label())
	}
	return out
}

func (r *Report) api(name string) *apiTally {
	if a, ok := r.apis[name]; ok {
		return a
	}
	if len(r.apis) >= maxAPIs {
		name = "(other APIs)"
		if a, ok := r.apis[name]; ok {
			return a
		}
	}
	a := &apiTally{APISummary: APISummary{API: name}, paths: map[string]int{}}
	r.apis[name] = a
	return a
}

// Counts is the running tally, cheap to read after every result.
type Counts struct{ Sessions, Passed, Failed, Errors int }

// Counts returns the tally so far.
func (r *Report) Counts() Counts {
	return Counts{r.sum.Sessions, r.sum.Passed, r.sum.Failed, r.sum.Errors}
}

// Incomplete marks the report as covering part of the run only (an
// interrupted replay), saying why; summary.json then has "complete":
// false.
// Destinations keeps the mock server's destination decisions that are not
// exact (see Summary.Destinations). Call it before Close.
func (r *Report) Destinations(ds []mockserver.DestDecision) {
	for _, d := range ds {
		if d.How != mockserver.HowExact {
			r.sum.Destinations = append(r.sum.Destinations, d)
		}
	}
}

func (r *Report) Incomplete(why string) {
	if why == "" {
		why = "stopped early"
	}
	r.sum.Incomplete = why
}

// Summary returns the tally so far, with the per-API table.
func (r *Report) Summary() Summary {
	s := r.sum
	s.Complete = s.Incomplete == ""
	s.Started = r.started
	s.Seconds = time.Since(r.started).Seconds()
	if s.Seconds > 0 {
		s.Rate = float64(s.Sessions) / s.Seconds
	}
	s.DetailsShown = len(r.details)
	s.APIs = make([]APISummary, 0, len(r.apis))
	for _, a := range r.apis {
		as := a.APISummary
		for p, n := range a.paths {
			as.Paths = append(as.Paths, PathCount{Path: p, Sessions: n})
		}
		sort.Slice(as.Paths, func(i, j int) bool {
			if as.Paths[i].Sessions != as.Paths[j].Sessions {
				return as.Paths[i].Sessions > as.Paths[j].Sessions
			}
			return as.Paths[i].Path < as.Paths[j].Path
		})
		if len(as.Paths) > 10 {
			as.Paths = as.Paths[:10]
		}
		s.APIs = append(s.APIs, as)
	}
	sort.Slice(s.APIs, func(i, j int) bool { return s.APIs[i].API < s.APIs[j].API })
	return s
}

// Close writes summary.json, junit.xml and report.html (when Options.Dir
// is set) and returns the final summary.
func (r *Report) Close() (*Summary, error) {
	s := r.Summary()
	if r.opt.Dir == "" {
		return &s, nil
	}
	err := r.err
	if ferr := r.sessW.Flush(); err == nil {
		err = ferr
	}
	if cerr := r.sessions.Close(); err == nil {
		err = cerr
	}
	if ferr := r.casesW.Flush(); err == nil {
		err = ferr
	}
	casesName := r.cases.Name()
	defer os.Remove(casesName)
	r.cases.Close()
	if err != nil {
		return &s, fmt.Errorf("report: %w", err)
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(r.opt.Dir, SummaryFile), append(b, '\n'), 0o644); err != nil {
		return &s, fmt.Errorf("report: %w", err)
	}
	if err := writeJUnit(filepath.Join(r.opt.Dir, JUnitFile), casesName, &s); err != nil {
		return &s, fmt.Errorf("report: %w", err)
	}
	if err := writeHTML(filepath.Join(r.opt.Dir, HTMLFile), &s, r.details, r.opt.NoiseRules); err != nil {
		return &s, fmt.Errorf("report: %w", err)
	}
	return &s, nil
}
