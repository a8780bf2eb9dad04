package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/report"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

// Options configure Run. Zero values are noted per field.
type Options struct {
	// Dir is the work directory: recordings, reports and load results go
	// there. Required; created if missing.
	Dir string
	// Exe and ExeArgs start the orders service, with ChildEnv=1 in its
	// environment (the retrace binary itself and "demo"). Exe is required.
	Exe     string
	ExeArgs []string
	// Requests recorded; zero means 300.
	Requests int
	// Clients sending at once while recording, and sessions replayed at
	// once; zero means 16.
	Clients int
	// Spread is how long the recorded traffic lasts; zero means 4s.
	Spread time.Duration
	// Speed is the load replay's speed-up of the recorded pace; zero
	// means 2.
	Speed float64
	// Out receives the narration; nil discards it.
	Out io.Writer
	// Seed makes the traffic reproducible.
	Seed uint64
}

// Result is what a demo run produced.
type Result struct {
	Traffic  *TrafficStats
	Recorded int
	Noise    []diff.Rule
	Replay   *report.Summary // the recorded build, downstreams answered by the mock
	Changed  *report.Summary // the deliberately changed build, same recordings
	Load     *LoadResult
	// Directories of the outputs.
	Recordings, ReplayReport, ChangedReport, LoadDir string
}

// Verdict is nil when the story came out as it should: every session of
// the recorded build passed, the changed build was caught, and the load
// replay sent every recorded request.
func (r *Result) Verdict() error {
	var errs []error
	if r.Replay == nil || r.Replay.Sessions == 0 || r.Replay.Passed != r.Replay.Sessions {
		errs = append(errs, fmt.Errorf("replay of the recorded build: %s", tally(r.Replay)))
	}
	if r.Changed == nil || r.Changed.Failed == 0 {
		errs = append(errs, fmt.Errorf("the changed build was not caught: %s", tally(r.Changed)))
	}
	if r.Load == nil || r.Load.Summary.Total.Count != int64(r.Recorded) {
		n := int64(-1)
		if r.Load != nil {
			n = r.Load.Summary.Total.Count
		}
		errs = append(errs, fmt.Errorf("load replay sent %d of %d recorded requests", n, r.Recorded))
	}
	return errors.Join(errs...)
}

func tally(s *report.Summary) string {
	if s == nil {
		return "not run"
	}
	return fmt.Sprintf("%d sessions, %d passed, %d failed, %d errors", s.Sessions, s.Passed, s.Failed, s.Errors)
}

// demo is one run's state.
type demo struct {
	opt    Options
	out    io.Writer
	res    Result
	dn     *Downstreams
	log    *os.File            // the service processes' output
	schema *descriptors.Schema // the fraud service's, for gRPC messages by name
}

// Run tells the whole story: record the orders example on embedded
// downstreams, replay it with every downstream gone, catch a changed build,
// and replay the traffic as a load test. It returns the Result also when a
// step failed, with what was done so far.
func Run(ctx context.Context, opt Options) (*Result, error) {
	if opt.Dir == "" || opt.Exe == "" {
		return nil, errors.New("demo: Dir and Exe are required")
	}
	if opt.Requests == 0 {
		opt.Requests = 300
	}
	if opt.Clients == 0 {
		opt.Clients = 16
	}
	if opt.Spread == 0 {
		opt.Spread = 4 * time.Second
	}
	if opt.Speed == 0 {
		opt.Speed = 2
	}
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: work directory: %w", err)
	}
	d := &demo{opt: opt, out: opt.Out}
	var err error
	if d.schema, err = FraudSchema(); err != nil {
		return nil, err
	}
	d.res.Recordings = filepath.Join(opt.Dir, "recordings")
	d.res.ReplayReport = filepath.Join(opt.Dir, "replay-report")
	d.res.ChangedReport = filepath.Join(opt.Dir, "replay-report-changed")
	d.res.LoadDir = filepath.Join(opt.Dir, "load")
	if d.log, err = os.Create(filepath.Join(opt.Dir, "service.log")); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer d.log.Close()
	restore := QuietDependencies()
	defer restore()
	err = d.run(ctx)
	if d.dn != nil {
		d.dn.Close()
	}
	return &d.res, err
}

func (d *demo) step(n int, title string) {
	fmt.Fprintf(d.out, "\n== %d. %s\n", n, title)
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "   "+format+"\n", args...)
}

func (d *demo) run(ctx context.Context) error {
	start := time.Now()
	fmt.Fprintf(d.out, "retrace demo: work directory %s\n", d.opt.Dir)

	d.step(1, "Downstreams")
	var err error
	if d.dn, err = StartDownstreams(ctx, DownstreamAddrs{}); err != nil {
		return err
	}
	d.say("MySQL  (in-memory go-mysql-server)  %s   schema and %d users loaded", d.dn.MySQL.Addr(), orders.SeedUsers)
	d.say("Redis  (in-memory miniredis)        %s   stock, coupons, discounts", d.dn.RedisAddr())
	d.say("HTTPS  (pricing service)            %s   certificate made at start by a private CA", d.dn.PricingURL())
	d.say("gRPC   (fraud-check service)        %s   Screen (server stream), Check (unary), health", d.dn.FraudAddr())

	if err := d.record(ctx); err != nil {
		return err
	}

	d.step(4, "Every downstream stops")
	if err := d.dn.Stop(); err != nil {
		return err
	}
	d.say("MySQL, Redis, pricing and fraud are gone: from now on only the recordings can answer.")

	mock, err := d.startMock(ctx)
	if err != nil {
		return err
	}
	defer mock.Close()

	if err := d.replay(ctx, mock); err != nil {
		return err
	}
	if err := d.replayChanged(ctx, mock); err != nil {
		return err
	}
	mock.Close()

	if err := d.load(ctx); err != nil {
		return err
	}

	d.step(9, "Done")
	d.say("in %.1fs", time.Since(start).Seconds())
	d.say("recordings      %s", d.res.Recordings)
	d.say("replay report   %s", filepath.Join(d.res.ReplayReport, report.HTMLFile))
	d.say("changed build   %s", filepath.Join(d.res.ChangedReport, report.HTMLFile))
	d.say("load results    %s", d.res.LoadDir)
	d.say("service output  %s", d.log.Name())
	return d.res.Verdict()
}

// startService starts the orders service as a child process in mode, with
// extra environment.
func (d *demo) startService(ctx context.Context, mode string, env ...string) (*Service, error) {
	e := append([]string{ChildEnv + "=1", modeEnv + "=" + mode, childListenEnv + "=127.0.0.1:0"}, d.dn.Env()...)
	fmt.Fprintf(d.log, "--- orders service, RETRACE_MODE=%s %s\n", mode, strings.Join(env, " "))
	return StartService(ctx, ServiceSpec{Path: d.opt.Exe, Args: d.opt.ExeArgs, Env: append(e, env...), Log: d.log})
}

func (d *demo) record(ctx context.Context) error {
	d.step(2, "Record: the orders service runs with the agent in record mode")
	svc, err := d.startService(ctx, "record", "RETRACE_RECORD="+d.res.Recordings, "RETRACE_APP=orders")
	if err != nil {
		return err
	}
	defer svc.Stop()
	d.say("orders listens on %s (a child process: the agent patches only the process it runs in)", svc.Addr())
	d.say("RETRACE_MODE=record RETRACE_RECORD=%s", d.res.Recordings)

	d.step(3, fmt.Sprintf("Traffic: %d requests from %d concurrent clients over %v", d.opt.Requests, d.opt.Clients, d.opt.Spread))
	st, err := Traffic{BaseURL: svc.URL(), Requests: d.opt.Requests, Clients: d.opt.Clients, Duration: d.opt.Spread, Seed: d.opt.Seed}.Run(ctx)
	d.res.Traffic = st
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	for _, api := range st.APIs() {
		fmt.Fprintf(tw, "   %s\t%d\n", api, st.ByAPI[api])
	}
	tw.Flush()
	var codes []string
	for _, c := range sortedKeys(st.ByStatus) {
		codes = append(codes, fmt.Sprintf("%d×%d", st.ByStatus[c], c))
	}
	d.say("answers: %s; %d transport errors", strings.Join(codes, ", "), st.Errors)
	if err := svc.Stop(); err != nil {
		return fmt.Errorf("stopping the recording service: %w", err)
	}
	n, bg, example, err := countSessions(ctx, d.res.Recordings)
	if err != nil {
		return err
	}
	d.res.Recorded = n
	d.say("recorded %d sessions (JSONL, one per line) in %s", n, d.res.Recordings)
	if bg > 0 {
		d.say("and %d calls of no request (start-up and background traffic), for the mock server", bg)
	}
	if example != nil {
		d.say("e.g. session %s: %s with %s", example.ID, firstLine(example.Inbound.Request), callSummary(example))
		for _, l := range grpcCalls(example) {
			d.say("  %s", l)
		}
	}
	if n != st.Requests {
		return fmt.Errorf("demo: %d requests sent but %d sessions recorded", st.Requests, n)
	}
	return nil
}

func (d *demo) startMock(ctx context.Context) (*mockserver.Server, error) {
	d.step(5, "Mock server: answers every downstream call from the recordings")
	store, err := recording.Open(ctx, d.res.Recordings)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	mock, err := mockserver.New(mockserver.Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	n, err := mock.Load(ctx, store.Scan)
	if err != nil {
		mock.Close()
		return nil, err
	}
	if err := mock.Start(); err != nil {
		mock.Close()
		return nil, err
	}
	d.say("loaded %d sessions; framed traffic on %s, admin API %s", n, mock.Addr(), mock.AdminURL())
	return mock, nil
}

// replayRun replays every session against svc and writes a report to dir.
func (d *demo) replayRun(ctx context.Context, svc *Service, mock *mockserver.Server, rules *diff.Rules, dir string) (*report.Summary, error) {
	store, err := recording.Open(ctx, d.res.Recordings)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	cfg := regress.Config{Source: store, Target: svc.URL(), MockAdmin: mock.AdminURL(), Concurrency: d.opt.Clients, Rules: rules,
		Timeout: 15 * time.Second, Schema: d.schema}
	rep, err := report.New(report.Options{Dir: dir, Target: svc.URL(), NoiseRules: d.res.Noise})
	if err != nil {
		return nil, err
	}
	runErr := regress.Run(ctx, cfg, rep.Add)
	sum, err := rep.Close()
	if runErr != nil {
		return sum, runErr
	}
	return sum, err
}

func (d *demo) replay(ctx context.Context, mock *mockserver.Server) error {
	d.step(6, "Replay: the same build, in replay mode, against the mock")
	svc, err := d.startService(ctx, "replay", mockAddrEnv+"="+mock.Addr())
	if err != nil {
		return err
	}
	defer svc.Stop()
	d.say("orders listens on %s with RETRACE_MODE=replay RETRACE_MOCK_ADDR=%s:", svc.Addr(), mock.Addr())
	d.say("every outbound connection goes to the mock, every write is framed with its request's trace id")

	store, err := recording.Open(ctx, d.res.Recordings)
	if err != nil {
		return err
	}
	noise, err := regress.DetectNoise(ctx, regress.Config{Source: store, Target: svc.URL(), MockAdmin: mock.AdminURL(), Concurrency: d.opt.Clients,
		Timeout: 15 * time.Second, Schema: d.schema}, regress.NoiseConfig{})
	store.Close()
	if err != nil {
		return fmt.Errorf("noise detection: %w", err)
	}
	d.res.Noise = noise.Rules
	d.say("noise detection replayed %d sessions twice each; what differed between two replays of one build is noise:", noise.Sessions)
	for _, r := range noise.Rules {
		where := r.Scope
		if r.Dst != "" {
			where += " " + r.Dst
		}
		d.say("  ignore %-28s %s (%s)", r.Ignore, r.API, where)
	}
	rules, err := diff.NewRules(noise.Rules...)
	if err != nil {
		return err
	}
	d.say("replaying all %d sessions, %d at once…", d.res.Recorded, d.opt.Clients)
	sum, err := d.replayRun(ctx, svc, mock, rules, d.res.ReplayReport)
	d.res.Replay = sum
	if sum != nil {
		d.text(sum)
	}
	if err != nil {
		return err
	}
	d.say("HTML report: %s", filepath.Join(d.res.ReplayReport, report.HTMLFile))
	return nil
}

func (d *demo) replayChanged(ctx context.Context, mock *mockserver.Server) error {
	d.step(7, "Replay against a changed build (ORDERS_VARIANT=changed)")
	d.say("this build answers status \"pending\" instead of \"created\", sends channel=web to pricing")
	d.say("and tells the fraud check (gRPC) a discounted order's total before the discount")
	svc, err := d.startService(ctx, "replay", mockAddrEnv+"="+mock.Addr(), orders.EnvVariant+"="+orders.VariantChanged)
	if err != nil {
		return err
	}
	defer svc.Stop()
	rules, err := diff.NewRules(d.res.Noise...)
	if err != nil {
		return err
	}
	sum, err := d.replayRun(ctx, svc, mock, rules, d.res.ChangedReport)
	d.res.Changed = sum
	if sum != nil {
		d.text(sum)
	}
	if err != nil {
		return err
	}
	d.say("HTML report: %s", filepath.Join(d.res.ChangedReport, report.HTMLFile))
	return nil
}

// text prints a replay summary indented.
func (d *demo) text(s *report.Summary) {
	var b strings.Builder
	report.WriteText(&b, s)
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		d.say("%s", l)
	}
}

func countSessions(ctx context.Context, dir string) (n, background int, example *recording.Session, err error) {
	store, err := recording.Open(ctx, dir)
	if err != nil {
		return 0, 0, nil, err
	}
	defer store.Close()
	err = store.Scan(ctx, func(s *recording.Session) error {
		if s.Background {
			background += len(s.Calls)
			return nil
		}
		n++
		if example == nil && strings.HasPrefix(string(s.Inbound.Request), "POST /orders ") && strings.Contains(firstLine(s.Inbound.Response), " 201 ") {
			example = s
		}
		return nil
	})
	return n, background, example, err
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\r\n")
	return s
}

// callSummary counts a session's downstream calls by protocol.
func callSummary(s *recording.Session) string {
	by := map[string]int{}
	setup := 0
	for _, c := range s.Calls {
		if c.Setup {
			setup++
			continue
		}
		by[c.Proto]++
	}
	var parts []string
	for _, p := range sortedKeys(by) {
		parts = append(parts, fmt.Sprintf("%d %s", by[p], p))
	}
	out := strings.Join(parts, ", ") + " calls"
	if setup > 0 {
		out += fmt.Sprintf(" (+%d connection set-up)", setup)
	}
	return out
}

// FraudSchema is the fraud-check service's protobuf schema, by which the
// demo shows and compares its messages by field name (as `retrace replay
// --proto-descriptors` does with a descriptor set file).
func FraudSchema() (*descriptors.Schema, error) {
	b, err := fraud.FileDescriptorSet()
	if err != nil {
		return nil, fmt.Errorf("demo: fraud schema: %w", err)
	}
	return descriptors.Parse(b)
}

// grpcCalls shows the gRPC calls of a session decoded, their messages by
// field name from the fraud service's descriptor set.
func grpcCalls(s *recording.Session) []string {
	schema, _ := FraudSchema() // without it, by field number
	var out []string
	for _, c := range s.Calls {
		if c.Proto != http2.GRPCName || c.Setup {
			continue
		}
		req, _, rerr := http2.ParseMessage(c.Request)
		resp, _, perr := http2.ParseMessage(c.Response)
		if rerr != nil || perr != nil {
			out = append(out, fmt.Sprintf("gRPC call not decoded: %v", errors.Join(rerr, perr)))
			continue
		}
		path, _ := http2.Get(req.Header, ":path")
		in := http2.DecodeMessage(false, req, schema, path)
		back := http2.DecodeMessage(true, resp, schema, path)
		out = append(out, fmt.Sprintf("gRPC %s %s → %s %s", path, messages(in), back.Text, messages(back)))
	}
	return out
}

// messages lists the message fields of a decoded half, "{a=1 b=2} {…}".
func messages(d wire.Decoded) string {
	var b strings.Builder
	cur := ""
	for _, f := range d.Fields {
		m, field, ok := strings.Cut(f.Path, "].")
		if !ok || !strings.HasPrefix(m, "message[") {
			continue
		}
		if m != cur {
			if cur != "" {
				b.WriteString("} ")
			}
			b.WriteString("{")
			cur = m
		} else {
			b.WriteString(" ")
		}
		b.WriteString(field + "=" + f.Value)
	}
	if cur != "" {
		b.WriteString("}")
	}
	return b.String()
}

func sortedKeys[K interface{ ~int | ~string }, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
