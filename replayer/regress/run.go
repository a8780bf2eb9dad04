package regress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

// Config describes a regression replay. Source and Target are required.
type Config struct {
	Source Source
	Select Selection
	// Target is the base URL of the build under test (http or https; a
	// path is prepended to every request target).
	Target string
	// MockAdmin is the admin API base URL of the mock server that answers
	// the target's downstream calls. Empty: downstream calls are not
	// diffed and each replay uses the recording id as trace id.
	MockAdmin string
	// Baseline, when set, turns on A/B mode: every session is replayed
	// against Baseline as well, and a difference the baseline shows too is
	// reported as pre-existing, not as a failure.
	Baseline string
	// BaselineMockAdmin is the baseline's mock server; empty: MockAdmin.
	BaselineMockAdmin string
	// MockAdminToken is sent to the mock admin APIs as "Authorization:
	// Bearer TOKEN" (a mock server started with an admin token); empty:
	// none.
	MockAdminToken string
	// Concurrency is the number of sessions in flight (and connections
	// per target). Zero: 8.
	Concurrency int
	// Repeat replays every session this many times at once, each under its
	// own trace id. Zero: 1.
	Repeat int
	// Rules says what not to compare. Nil: compare everything.
	Rules *diff.Rules
	// TLS configures the connections to https targets: RootCAs (the CA
	// that signed the target's certificate), InsecureSkipVerify,
	// Certificates (a client certificate, for a target that requires
	// one). ServerName and NextProtos are set per target. Nil: the
	// system's roots.
	TLS *tls.Config
	// Timeout bounds each request to a target or the mock admin API.
	// Zero: 30s.
	Timeout time.Duration
	// NoModeCheck turns off the check that stops a replay whose target is
	// not in replay mode (the mock server sees none of the calls of the
	// first sessions that recorded some). Set it when every downstream of
	// the target is a pass-through destination.
	NoModeCheck bool
	// Schema, when set, decodes the protobuf messages of gRPC sessions and
	// calls by field name (a descriptor set, or the target's server
	// reflection); nil: by field number.
	Schema *descriptors.Schema
	// Logf receives warnings that do not stop the run (a recording line
	// that does not decode, a mock admin call that failed to clean up).
	// Nil: discarded.
	Logf func(format string, args ...any)
}

// DefaultConcurrency is the concurrency of a zero Config.
const DefaultConcurrency = 8

func (c *Config) withDefaults() Config {
	o := *c
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Repeat <= 0 {
		o.Repeat = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Baseline != "" && o.BaselineMockAdmin == "" {
		o.BaselineMockAdmin = o.MockAdmin
	}
	return o
}

// ErrConfig marks a configuration error (exit status 2 in the CLI).
var ErrConfig = errors.New("bad replay configuration")

// side is one build the sessions are replayed against.
type side struct {
	name   string // "candidate" or "baseline"
	target *target
	admin  *admin    // nil: no downstream diff
	h2     *h2Client // HTTP/2 and gRPC sessions: streams of shared connections
}

type runner struct {
	cfg       Config
	candidate *side
	baseline  *side      // nil unless A/B
	mode      *modeCheck // nil: no check
}

func newRunner(c *Config) (*runner, error) {
	cfg := c.withDefaults()
	if cfg.Source == nil {
		return nil, fmt.Errorf("%w: no recordings source", ErrConfig)
	}
	if cfg.Target == "" {
		return nil, fmt.Errorf("%w: no target URL", ErrConfig)
	}
	r := &runner{cfg: cfg}
	var err error
	if r.candidate, err = newSide("candidate", cfg.Target, cfg.MockAdmin, &cfg); err != nil {
		return nil, err
	}
	if cfg.Baseline != "" {
		if r.baseline, err = newSide("baseline", cfg.Baseline, cfg.BaselineMockAdmin, &cfg); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func newSide(name, targetURL, adminURL string, cfg *Config) (*side, error) {
	t, err := parseTarget(targetURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	t.tlsConfig = cfg.TLS
	s := &side{name: name, target: t, h2: &h2Client{t: t}}
	if adminURL != "" {
		if s.admin, err = newAdmin(adminURL, cfg.MockAdminToken, cfg.Concurrency, cfg.Timeout); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	return s, nil
}

func (r *runner) close() {
	for _, s := range []*side{r.candidate, r.baseline} {
		if s != nil && s.admin != nil {
			s.admin.close()
		}
		if s != nil {
			s.h2.close()
		}
	}
}

// worker is the state one goroutine of the pool owns: a connection per
// target.
type worker struct {
	clients map[*side]*client
}

func (w *worker) client(s *side, timeout time.Duration) *client {
	c := w.clients[s]
	if c == nil {
		c = &client{t: s.target, timeout: timeout}
		w.clients[s] = c
	}
	return c
}

func (w *worker) close() {
	for _, c := range w.clients {
		c.close()
	}
}

type job struct {
	s *recording.Session
	k int
}

// runPool streams the selected sessions into Concurrency workers: pick
// says how many jobs a session makes (0 skips it), do runs one job, emit
// receives the outputs on the calling goroutine. Memory holds at most
// about 2×Concurrency sessions at any time.
func runPool[T any](ctx context.Context, r *runner, pick func(*recording.Session) int,
	do func(ctx context.Context, w *worker, j job) T, emit func(T)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := r.cfg.Concurrency
	jobs := make(chan job, n)
	outs := make(chan T, n)
	var scanErr error
	go func() { // the producer: owns jobs
		defer close(jobs)
		selected := 0
		scanErr = r.cfg.Source.Scan(ctx, func(s *recording.Session) error {
			if !r.cfg.Select.match(s) {
				return nil
			}
			if r.cfg.Select.Limit > 0 && selected >= r.cfg.Select.Limit {
				return recording.ErrStop
			}
			k := pick(s)
			if k == 0 {
				return nil
			}
			selected++
			for i := 0; i < k; i++ {
				select {
				case jobs <- job{s, i}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		if errors.Is(scanErr, recording.ErrStop) { // sources other than stores
			scanErr = nil
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{clients: map[*side]*client{}}
			defer w.close()
			for j := range jobs {
				if ctx.Err() != nil {
					continue // stopped: a job not begun is no result (the run says it is incomplete)
				}
				outs <- do(ctx, w, j)
			}
		}()
	}
	go func() { wg.Wait(); close(outs) }()
	for o := range outs {
		emit(o)
	}
	if scanErr != nil && !errors.Is(scanErr, context.Canceled) {
		return fmt.Errorf("reading recordings: %w", scanErr)
	}
	return ctx.Err()
}

// Run replays the selected sessions and calls emit with the result of
// every replay, on the calling goroutine, in order of completion. Errors of
// single sessions are results, never the error of Run; Run fails only for
// a bad configuration (wrapping ErrConfig), an unreadable source, or a
// cancelled ctx.
func Run(ctx context.Context, cfg Config, emit func(*Result)) error {
	r, err := newRunner(&cfg)
	if err != nil {
		return err
	}
	defer r.close()
	if err := r.preflight(ctx); err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if r.candidate.admin != nil && !r.cfg.NoModeCheck {
		r.mode = &modeCheck{stop: stop}
	}
	repeat := r.cfg.Repeat
	err = runPool(ctx, r, func(*recording.Session) int { return repeat }, r.replaySession, emit)
	if cause := context.Cause(ctx); errors.Is(cause, ErrNotReplaying) {
		return cause
	}
	return err
}

// Count returns how many replays Run would make with cfg (for a progress
// bar); it reads the source once more.
func Count(ctx context.Context, cfg Config) (int, error) {
	c := cfg.withDefaults()
	n := 0
	err := c.Source.Scan(ctx, func(s *recording.Session) error {
		if !c.Select.match(s) {
			return nil
		}
		if c.Select.Limit > 0 && n >= c.Select.Limit {
			return recording.ErrStop
		}
		n++
		return nil
	})
	if errors.Is(err, recording.ErrStop) {
		err = nil
	}
	return n * c.Repeat, err
}

// attempt is one replay of a session against one side.
type attempt struct {
	trace  string
	resp   *http1.ParsedResponse // HTTP/1 sessions
	h2     *h2Response           // HTTP/2 and gRPC sessions
	h2dec  *wire.Decoded         // h2 decoded
	report *mockserver.TraceReport
	err    error
}

// replay sends s to one side under a fresh trace id and collects what the
// mock server saw.
func (r *runner) replay(ctx context.Context, w *worker, sd *side, s *recording.Session, k int, label string) attempt {
	a := attempt{trace: r.traceID(sd, s, k, label)}
	if sd.admin != nil && a.trace != s.ID {
		if err := sd.admin.register(ctx, a.trace, s.ID); err != nil {
			a.err = err
			return a
		}
	}
	at := s.At.UnixNano() + s.Inbound.StartNs
	if s.At.IsZero() {
		at = 0
	}
	if isH2(s) {
		a.h2, a.err = r.replayH2(ctx, sd, s, a.trace, at)
	} else {
		a.resp, a.err = w.client(sd, r.cfg.Timeout).do(ctx, s.Inbound.Request, a.trace, replayed{time: at, random: s.Random})
	}
	if sd.admin != nil {
		rep, err := sd.admin.report(ctx, a.trace)
		if err != nil && a.err == nil {
			a.err = err
		}
		a.report = rep
		if err := sd.admin.forget(context.WithoutCancel(ctx), a.trace); err != nil {
			r.cfg.Logf("%v", err)
		}
	}
	return a
}

// replayH2 sends an HTTP/2 or gRPC session as one stream.
func (r *runner) replayH2(ctx context.Context, sd *side, s *recording.Session, trace string, at int64) (*h2Response, error) {
	req, _, err := http2.ParseMessage(s.Inbound.Request)
	if err != nil {
		return nil, fmt.Errorf("%w: request: %v", errRecordedH2, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	resp, err := sd.h2.do(ctx, req, trace, at)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("timeout after %v: %w", r.cfg.Timeout, err)
	}
	return resp, err
}

// traceID picks the trace id of one replay. With a mock admin API every
// replay gets a fresh id registered as an alias of the recording, so the
// same recording can be in flight several times; without one the recording
// id itself selects the recording.
func (r *runner) traceID(sd *side, s *recording.Session, k int, label string) string {
	if sd.admin != nil {
		return trace.NewID()
	}
	id := s.ID
	if k > 0 || label != "" {
		id = fmt.Sprintf("%s.%s%d", s.ID, label, k)
	}
	if !trace.ValidID(id) {
		return trace.NewID()
	}
	return id
}

// replaySession replays one job and judges it.
func (r *runner) replaySession(ctx context.Context, w *worker, j job) *Result {
	s := j.s
	start := time.Now()
	method, path := RequestLine(s.Inbound.Request)
	res := &Result{Session: s.ID, Replay: j.k, API: APIName(method, path)}
	defer func() { res.Elapsed = time.Since(start) }()
	fail := func(err error, d *Detail) *Result {
		res.Status, res.Error, res.Detail = Errored, err.Error(), d
		return res
	}
	if s.Inbound.RequestTruncated {
		return fail(fmt.Errorf("recorded request was truncated at %d bytes; not replayed", len(s.Inbound.Request)), nil)
	}
	if isH2(s) {
		return r.replaySessionH2(ctx, w, j, res, fail)
	}
	rec, err := http1.ParseResponse(s.Inbound.Response, method)
	if err != nil {
		return fail(fmt.Errorf("recorded response: %w", err), &Detail{Request: capBytes(s.Inbound.Request)})
	}
	detail := &Detail{Request: capBytes(s.Inbound.Request), Recorded: capResponse(rec)}
	cand := r.replay(ctx, w, r.candidate, s, j.k, "")
	res.Trace = cand.trace
	detail.Replayed = capResponse(cand.resp)
	if cand.err != nil {
		return fail(cand.err, detail)
	}
	if cand.report != nil {
		r.mode.observe(s, len(cand.report.Calls))
	}
	found, calls := r.judge(res.API, s, recorded{http: rec}, cand)
	detail.Calls = calls
	if r.baseline != nil {
		base := r.replay(ctx, w, r.baseline, s, j.k, "b")
		detail.Baseline = capResponse(base.resp)
		if base.err != nil {
			return fail(fmt.Errorf("baseline: %w", base.err), detail)
		}
		inBase, _ := r.judge(res.API, s, recorded{http: rec}, base)
		found, res.Preexisting = classify(found, inBase)
	}
	res.Findings = found
	res.Status = Passed
	if len(found) > 0 {
		res.Status, res.Detail = Failed, detail
	}
	return res
}

// replaySessionH2 replays one job of an HTTP/2 or gRPC session and
// judges it: its response decoded (status, metadata, messages field by
// field, trailers, gRPC status) against the recorded one. An exchange
// that does not decode on either side is an error, never a pass.
func (r *runner) replaySessionH2(ctx context.Context, w *worker, j job, res *Result, fail func(error, *Detail) *Result) *Result {
	s := j.s
	rec, err := r.readH2(s)
	if err != nil {
		return fail(err, &Detail{Request: capBytes(s.Inbound.Request)})
	}
	detail := &Detail{Request: capBytes(s.Inbound.Request), RequestForm: &rec.request, RecordedForm: &rec.decoded}
	cand := r.replay(ctx, w, r.candidate, s, j.k, "")
	res.Trace = cand.trace
	if cand.err == nil {
		cand.err = r.decodeReplayed(rec, &cand)
	}
	detail.ReplayedForm = cand.h2dec
	if cand.err != nil {
		return fail(cand.err, detail)
	}
	if cand.report != nil {
		r.mode.observe(s, len(cand.report.Calls))
	}
	found, calls := r.judge(res.API, s, recorded{h2: &rec.decoded}, cand)
	detail.Calls = calls
	if r.baseline != nil {
		base := r.replay(ctx, w, r.baseline, s, j.k, "b")
		if base.err == nil {
			base.err = r.decodeReplayed(rec, &base)
		}
		detail.BaselineForm = base.h2dec
		if base.err != nil {
			return fail(fmt.Errorf("baseline: %w", base.err), detail)
		}
		inBase, _ := r.judge(res.API, s, recorded{h2: &rec.decoded}, base)
		found, res.Preexisting = classify(found, inBase)
	}
	res.Findings = found
	res.Status = Passed
	if len(found) > 0 {
		res.Status, res.Detail = Failed, detail
	}
	return res
}

// recorded is a session's recorded response as compared: an HTTP/1
// response, or an HTTP/2 one decoded.
type recorded struct {
	http *http1.ParsedResponse
	h2   *wire.Decoded
}

// compareResponse diffs the response of an attempt with the recorded one.
func (r *runner) compareResponse(api string, rec recorded, a *attempt) []diff.Difference {
	if rec.h2 != nil {
		return r.cfg.Rules.CompareDecoded(api, diff.ScopeResponse, "", *rec.h2, *a.h2dec)
	}
	return r.cfg.Rules.CompareResponses(api, rec.http, a.resp)
}

// judge diffs one attempt against the recording.
func (r *runner) judge(api string, s *recording.Session, rec recorded, a attempt) ([]Finding, []CallDetail) {
	var out []Finding
	for _, d := range r.compareResponse(api, rec, &a) {
		out = append(out, Finding{Difference: d, Where: InResponse})
	}
	if a.report == nil {
		return out, nil
	}
	for _, d := range a.report.Random {
		out = append(out, Finding{Where: InRandom, Difference: diff.Difference{
			Path: fmt.Sprintf("%s[%d]", d.Source, d.Draw), Kind: diff.Added, Note: "randomness diverged: " + d.Reason}})
	}
	fs, calls := downstream(r.cfg.Rules, r.cfg.Schema, api, s, a.report)
	return append(out, fs...), calls
}

// maxCallDetails bounds the downstream calls kept for one failing session.
const maxCallDetails = 200

// downstream diffs every call the replay made with the recorded call it
// matched, and flags calls without recording and recorded calls never
// made.
func downstream(rules *diff.Rules, schema *descriptors.Schema, api string, s *recording.Session, rep *mockserver.TraceReport) ([]Finding, []CallDetail) {
	bySeq := make(map[int]*recording.Call, len(s.Calls))
	for i := range s.Calls {
		bySeq[s.Calls[i].Seq] = &s.Calls[i]
	}
	var out []Finding
	var calls []CallDetail
	keep := func(cd CallDetail) {
		if len(calls) < maxCallDetails {
			cd.Recorded, cd.Replayed = capBytes(cd.Recorded), capBytes(cd.Replayed)
			calls = append(calls, cd)
		}
	}
	// MySQL destinations are compared command by command (mysql.go).
	bySQL := map[string]bool{}
	for _, oc := range rep.Calls {
		if !oc.Setup && !oc.Proxied && oc.Proto == "mysql" && !bySQL[oc.Dst] {
			fs, cds, ok := mysqlFindings(rules, api, oc.Dst, s, rep)
			if ok {
				out = append(out, fs...)
				for _, cd := range cds {
					keep(cd)
				}
			}
			bySQL[oc.Dst] = ok
		}
	}
	joined := joinByMatch(rep.Calls)
	done := map[int]bool{}
	for _, oc := range rep.Calls {
		if oc.Setup || oc.Proxied || bySQL[oc.Dst] {
			continue // proxied: a pass-through destination, answered by the real server
		}
		ref := &CallRef{Seq: oc.Seq, Matched: oc.Matched, Proto: oc.Proto, Dst: oc.Dst, Summary: summarize(oc.Proto, oc.Request)}
		cd := CallDetail{CallRef: *ref, Replayed: oc.Request}
		rc := bySeq[oc.Matched]
		switch {
		case oc.Matched < 0 || rc == nil || rc.Dst != oc.Dst:
			if rules.Ignores(api, diff.ScopeDownstream, oc.Dst, "call") || diff.Insignificant(oc.Proto, oc.Request) {
				continue
			}
			note := "no recorded call matched"
			if oc.Matched >= 0 {
				note = fmt.Sprintf("matched recorded call #%d, which the recording does not have", oc.Matched)
			}
			if oc.Error != "" {
				note += ": " + oc.Error
			}
			d := diff.Difference{Path: "call", Kind: diff.Added, Got: ref.Summary, Note: note}
			cd.Diffs = []diff.Difference{d}
			out = append(out, Finding{Difference: d, Where: InDownstream, Call: ref})
		case done[oc.Matched]:
			continue // compared with the first call of its group
		default:
			done[oc.Matched] = true
			cd.Recorded, cd.Replayed = rc.Request, joined[matchKey{oc.Dst, oc.Matched}]
			var ds []diff.Difference
			ds, cd.RecordedForm, cd.ReplayedForm = compareCall(rules, schema, api, oc.Proto, oc.Dst, rc.Request, cd.Replayed)
			cd.Diffs = relocated(oc, ds)
			for _, d := range cd.Diffs {
				out = append(out, Finding{Difference: d, Where: InDownstream, Call: ref})
			}
		}
		keep(cd)
	}
	for _, u := range rep.Unused {
		if u.Setup || bySQL[u.Dst] || rules.Ignores(api, diff.ScopeDownstream, u.Dst, "call") || diff.Insignificant(u.Proto, u.Request) {
			continue
		}
		ref := &CallRef{Seq: -1, Matched: u.Seq, Proto: u.Proto, Dst: u.Dst, Summary: summarize(u.Proto, u.Request)}
		d := diff.Difference{Path: "call", Kind: diff.Removed, Want: ref.Summary, Note: "recorded call never made"}
		out = append(out, Finding{Difference: d, Where: InDownstream, Call: ref})
		keep(CallDetail{CallRef: *ref, Recorded: u.Request, Diffs: []diff.Difference{d}})
	}
	return out, calls
}

// relocated drops from a call's differences the one that only says the
// replay environment names the destination otherwise: a request to a
// destination the mock server mapped to a recorded one (ObservedCall.Live)
// carries the live name in its Host header.
func relocated(oc mockserver.ObservedCall, ds []diff.Difference) []diff.Difference {
	if oc.Live == "" {
		return ds
	}
	host, _, _ := strings.Cut(oc.Live, ":")
	out := ds[:0]
	for _, d := range ds {
		if (d.Path == "header.Host" || d.Path == "header.:authority") && (d.Got == oc.Live || d.Got == host) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// joinByMatch concatenates, in order of arrival, the requests that matched
// the same recorded call. The mock server answers a recorded Redis pipeline
// (one write of several commands) command by command, so each command is
// an observed call matched to the same recorded call: together they are
// what the recording holds. A recorded call has one destination, so only
// requests to it join (a request to another one cannot have matched it).
func joinByMatch(calls []mockserver.ObservedCall) map[matchKey][]byte {
	out := map[matchKey][]byte{}
	for _, c := range calls {
		if !c.Setup && !c.Proxied && c.Matched >= 0 {
			k := matchKey{c.Dst, c.Matched}
			out[k] = append(out[k], c.Request...)
		}
	}
	return out
}

type matchKey struct {
	dst string
	seq int
}

// classify splits the candidate's findings: one the baseline shows too,
// with the same replayed value, is pre-existing; the rest are regressions.
func classify(candidate, baseline []Finding) (regressions, preexisting []Finding) {
	inBase := make(map[string]bool, len(baseline))
	for _, f := range baseline {
		inBase[f.key()] = true
	}
	for _, f := range candidate {
		if inBase[f.key()] {
			preexisting = append(preexisting, f)
		} else {
			regressions = append(regressions, f)
		}
	}
	return regressions, preexisting
}
