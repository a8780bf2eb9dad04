package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/report"
	"github.com/retrace-dev/retrace/replayer/schema"
)

func init() {
	commands["replay"] = command{summary: "regression replay: recorded sessions against a build, responses and downstream requests diffed", run: runReplay}
}

// replayList collects a repeated flag; commas also separate values.
type replayList []string

func (l *replayList) String() string { return strings.Join(*l, ",") }
func (l *replayList) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// replayTime is an RFC 3339 time or a duration back from now ("24h").
type replayTime struct{ t time.Time }

func (f *replayTime) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339Nano)
}

func (f *replayTime) Set(s string) error {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		f.t = t
		return nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		f.t = time.Now().Add(-d)
		return nil
	}
	return fmt.Errorf("want an RFC 3339 time (2026-11-29T10:00:00Z) or a duration back from now (24h)")
}

// NoiseRulesFile is the rules file noise detection writes into the report
// directory.
const noiseRulesFile = "noise-rules.json"

func runReplay(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "replay", "--recordings SRC --target URL [--mock-admin URL] [flags]",
		"retrace replay --recordings ./retrace-recordings --target http://127.0.0.1:8080 --mock-admin http://127.0.0.1:3516 \\\n"+
			"      --concurrency 32 --detect-noise 3 --api 'POST /orders*' --report ./replay-report")
	recordings := fs.String("recordings", "", "recordings: a directory, file://DIR, redis://HOST:PORT/N or an object-storage URL (required)")
	target := fs.String("target", "", "base URL of the build under test, e.g. http://127.0.0.1:8080 (required)")
	mockAdmin := fs.String("mock-admin", "", "admin API URL of the mock server answering the target's downstream calls; empty: no downstream diff")
	mockToken := fs.String("mock-admin-token", "", "token the mock admin API wants (the mock's --admin-token; default: $"+mockTokenEnv+")")
	concurrency := fs.Int("concurrency", regress.DefaultConcurrency, "sessions in flight at once (and connections per target)")
	reportDir := fs.String("report", "retrace-report", "directory for summary.json, junit.xml, report.html, sessions.jsonl")
	var apis, ids replayList
	fs.Var(&apis, "api", "replay only these APIs: glob on 'METHOD /path' or on the API name ('GET /orders/{id}'); repeatable")
	fs.Var(&ids, "id", "replay only these session ids; repeatable or comma-separated")
	var since, until replayTime
	fs.Var(&since, "since", "replay sessions recorded at or after this time (RFC 3339, or a duration back from now: 24h)")
	fs.Var(&until, "until", "replay sessions recorded before this time (RFC 3339 or a duration back from now)")
	limit := fs.Int("limit", 0, "replay at most this many sessions (0: all)")
	sample := fs.Float64("sample", 0, "replay this fraction of the selected sessions, 0 < f ≤ 1 (0: all)")
	seed := fs.Int64("seed", 1, "seed of --sample: the same seed picks the same sessions")
	rulesFile := fs.String("rules", "", "rules file (JSON) of paths to ignore, unordered arrays, numeric tolerances, ignored headers")
	detect := fs.Int("detect-noise", 0, "detect noise first: replay this many sessions per API --noise-runs times and ignore what differs (0: off)")
	noiseRuns := fs.Int("noise-runs", 2, "replays per session for noise detection (at least 2)")
	baseline := fs.String("baseline", "", "A/B mode: base URL of the baseline build; differences it shows too are pre-existing, not failures")
	baselineAdmin := fs.String("baseline-mock-admin", "", "admin API URL of the baseline's mock server (default: --mock-admin)")
	repeat := fs.Int("repeat", 1, "replay every session this many times at once, each under its own trace id")
	timeout := fs.Duration("timeout", 30*time.Second, "timeout of each request to a target or the mock admin API")
	noModeCheck := fs.Bool("no-mode-check", false, "do not stop when the mock server sees none of the first sessions' downstream calls (a target not in replay mode); for targets whose every downstream is a pass-through")
	maxDetails := fs.Int("max-details", report.DefaultMaxDetails, "failing sessions shown in full in report.html")
	caFile := fs.String("ca", "", "https targets: PEM file of the CA that signed their certificates (default: the system's roots)")
	insecure := fs.Bool("insecure", false, "https targets: do not verify their certificates")
	descriptors := fs.String("proto-descriptors", "", "gRPC: a descriptor set file (protoc --descriptor_set_out=FILE --include_imports) by which messages are compared and shown by field name (default: by field number)")
	reflect := fs.Bool("grpc-reflection", false, "gRPC: ask the target's server reflection service for the descriptors (instead of --proto-descriptors)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError("unexpected argument %q", fs.Arg(0))
	case *recordings == "":
		return usageError("--recordings is required")
	case *target == "":
		return usageError("--target is required")
	case *concurrency < 1:
		return usageError("--concurrency %d: want at least 1", *concurrency)
	case *repeat < 1:
		return usageError("--repeat %d: want at least 1", *repeat)
	case *sample < 0 || *sample > 1:
		return usageError("--sample %v: want a fraction in (0,1]", *sample)
	case *limit < 0:
		return usageError("--limit %d: want 0 or more", *limit)
	case *detect < 0:
		return usageError("--detect-noise %d: want 0 or more", *detect)
	case *noiseRuns < 2:
		return usageError("--noise-runs %d: want at least 2", *noiseRuns)
	case !since.t.IsZero() && !until.t.IsZero() && !since.t.Before(until.t):
		return usageError("--since %s is not before --until %s", since.String(), until.String())
	case *baselineAdmin != "" && *baseline == "":
		return usageError("--baseline-mock-admin needs --baseline")
	case *caFile != "" && *insecure:
		return usageError("--ca and --insecure: give one of them")
	case *descriptors != "" && *reflect:
		return usageError("--proto-descriptors and --grpc-reflection: give one of them")
	}
	tlsCfg, err := targetTLS(*caFile, *insecure)
	if err != nil {
		return usageError("%v", err)
	}
	var protoSchema *schema.Schema
	switch {
	case *descriptors != "":
		if protoSchema, err = schema.File(*descriptors); err != nil {
			return usageError("--proto-descriptors: %v", err)
		}
	case *reflect:
		rctx, cancel := context.WithTimeout(ctx, *timeout)
		protoSchema, err = schema.Reflect(rctx, *target, tlsCfg)
		cancel()
		if err != nil {
			return usageError("--grpc-reflection: %v", err)
		}
	}
	if *mockToken == "" {
		*mockToken = p.Getenv(mockTokenEnv) // not the flag's default: --help must not print it
	}
	var rules *diff.Rules
	if *rulesFile != "" {
		r, err := diff.LoadRules(*rulesFile)
		if err != nil {
			return usageError("%v", err)
		}
		rules = r
	}
	warn := func(format string, args ...any) {
		fmt.Fprintf(p.Stderr, "retrace replay: warning: "+format+"\n", args...)
	}
	src, err := regress.OpenSource(ctx, *recordings, func(err error) { warn("%v", err) })
	if err != nil {
		return usageError("%v", err)
	}
	defer src.Close()

	cfg := regress.Config{
		Source: src,
		Select: regress.Selection{APIs: apis, Since: since.t, Until: until.t, Limit: *limit, Sample: *sample, Seed: *seed},
		Target: *target, MockAdmin: *mockAdmin, MockAdminToken: *mockToken, Baseline: *baseline, BaselineMockAdmin: *baselineAdmin,
		Concurrency: *concurrency, Repeat: *repeat, Rules: rules, Timeout: *timeout, Logf: warn, TLS: tlsCfg,
		NoModeCheck: *noModeCheck, Schema: protoSchema,
	}
	if len(ids) > 0 {
		cfg.Select.IDs = map[string]bool{}
		for _, id := range ids {
			cfg.Select.IDs[id] = true
		}
	}
	if *mockAdmin == "" {
		warn("no --mock-admin: downstream requests are not diffed")
	}
	if err := os.MkdirAll(*reportDir, 0o755); err != nil {
		return usageError("--report %s: %v", *reportDir, err)
	}

	var noiseRules []diff.Rule
	if *detect > 0 {
		n, err := regress.DetectNoise(ctx, cfg, regress.NoiseConfig{PerAPI: *detect, Runs: *noiseRuns})
		if err != nil {
			return replayErr(err)
		}
		noiseRules = n.Rules
		path := filepath.Join(*reportDir, noiseRulesFile)
		if err := writeRulesFile(path, n.Rules); err != nil {
			return err
		}
		fmt.Fprintf(p.Stderr, "noise: replayed %d sessions %d times each (%d errors): %d paths differ between runs, ignored; rules in %s\n",
			n.Sessions, *noiseRuns, n.Errors, len(n.Rules), path)
		for _, id := range n.Unstable {
			warn("session %s answered with different status codes on identical replays (flaky; not ignored)", id)
		}
		learned, err := diff.NewRules(n.Rules...)
		if err != nil {
			return err
		}
		cfg.Rules = rules.With(learned)
	}

	rep, err := report.New(report.Options{Dir: *reportDir, MaxDetails: *maxDetails, Target: *target, Baseline: *baseline, NoiseRules: noiseRules})
	if err != nil {
		return err
	}
	var bar *report.Progress
	if f, ok := p.Stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		total, err := regress.Count(ctx, cfg)
		if err != nil {
			return replayErr(err)
		}
		bar = report.NewProgress(p.Stderr, total)
	}
	runErr := regress.Run(ctx, cfg, func(r *regress.Result) {
		rep.Add(r)
		if bar != nil {
			bar.Update(rep.Counts())
		}
	})
	if bar != nil {
		bar.Done(rep.Counts())
	}
	if *mockAdmin != "" {
		if ds, err := regress.Destinations(ctx, *mockAdmin, cfg.MockAdminToken, *timeout); err != nil {
			warn("destination decisions: %v", err)
		} else {
			rep.Destinations(ds)
		}
	}
	if runErr != nil {
		why := runErr.Error()
		if ctx.Err() != nil {
			why = "interrupted"
		}
		rep.Incomplete(why)
	}
	sum, err := rep.Close()
	if runErr != nil {
		if ctx.Err() != nil {
			report.WriteText(p.Stdout, sum)
			return failed("interrupted after %d sessions; %s says \"complete\": false", sum.Sessions, filepath.Join(*reportDir, report.SummaryFile))
		}
		return replayErr(runErr)
	}
	if err != nil {
		return err
	}
	report.WriteText(p.Stdout, sum)
	fmt.Fprintf(p.Stdout, "report: %s\n", filepath.Join(*reportDir, report.HTMLFile))
	switch {
	case sum.Sessions == 0:
		return usageError("no recorded session matched the selection in %s", *recordings)
	case sum.Failed > 0:
		return failed("%d of %d sessions failed (%d errors)", sum.Failed, sum.Sessions, sum.Errors)
	case sum.Errors > 0:
		return failed("%d of %d sessions could not be compared (errors)", sum.Errors, sum.Sessions)
	}
	return nil
}

// replayErr maps configuration errors to usage errors (exit status 2).
func replayErr(err error) error {
	if errors.Is(err, regress.ErrConfig) || errors.Is(err, regress.ErrUnreachable) || errors.Is(err, regress.ErrNotReplaying) {
		return usageError("%v", err)
	}
	return err
}

func writeRulesFile(path string, rules []diff.Rule) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := diff.WriteRules(f, rules); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// targetTLS is the TLS configuration of https targets from --ca and
// --insecure; nil for the system's roots.
func targetTLS(caFile string, insecure bool) (*tls.Config, error) {
	switch {
	case insecure:
		return &tls.Config{InsecureSkipVerify: true}, nil //nolint:gosec // --insecure asks for it
	case caFile == "":
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{RootCAs: pool}, nil
}
