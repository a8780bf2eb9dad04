package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	_ "github.com/retrace-dev/retrace/recording/cloud" // s3://, gs://, azblob:// for inputs and results
	"github.com/retrace-dev/retrace/replayer/load"
	"github.com/retrace-dev/retrace/replayer/objstore"
)

func init() {
	commands["load"] = command{summary: "load step 3: replay timed requests at their pace, a rate or flat out; write per-API histograms", run: runLoad}
}

func runLoad(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "load", "--input FILE --target URL --out DIR [--mode original|rate|max] [--shard I/N] …",
		"retrace load --input v2.jsonl --target http://127.0.0.1:8080 --mode rate --rate 200 --duration 5m --shard 0/4 --out s3://perf/run-42")
	input := fs.String("input", "", "timed-request JSONL: a path, a bucket URL, or - for stdin (required)")
	target := fs.String("target", "", "http://HOST:PORT[/prefix] (gRPC requests: h2c; https://: h2 over TLS) or mysql://USER:PW@tcp(HOST:PORT)/DB (required)")
	out := fs.String("out", "", "results directory or bucket URL; this shard writes DIR/shard-I-of-N/ (required)")
	modeS := fs.String("mode", "original", "pacing: original (recorded timestamps), rate (--rate or --ramp), max (as fast as answered)")
	speed := fs.Float64("speed", 1, "original mode: play recorded gaps this many times faster")
	rate := fs.Float64("rate", 0, "rate mode: requests per second, all shards together")
	rampS := fs.String("ramp", "", "rate mode: FROM:TO requests per second, linearly over --duration")
	duration := fs.Duration("duration", 0, "stop after this long (default: when the input ends); in rate mode the input is sent again, in order, until then")
	once := fs.Bool("once", false, "rate mode: stop at the end of the input even when --duration is longer")
	maxErr := -1.0
	fs.Var(percentFlag{&maxErr}, "max-error-rate", "exit 1 when the error rate of this shard exceeds this (e.g. 1%); a run whose every request failed always exits 1")
	conc := fs.Int("concurrency", 0, "max mode: requests in flight (default 32); paced modes: bound on requests in flight (default 10000)")
	shardS := fs.String("shard", "0/1", "run shard I of N: a deterministic, disjoint part of the input")
	stagger := fs.Duration("stagger", 10*time.Millisecond, "shard I starts I×stagger/N later than shard 0")
	var startAt timeFlag
	fs.Var(&startAt, "start-at", "common start time of all shards (RFC 3339); default: now")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request timeout")
	failStatus := fs.Int("fail-status", 500, "lowest HTTP status counted as an error")
	progress := fs.String("progress", "auto", "auto (live line on a terminal, else a log line every 10s), live, log, off")
	traceIDs := fs.Bool("trace-ids", false, "send each HTTP request with Retrace-Trace-Id, a fresh alias of the recording it came from: a service in replay mode (RETRACE_BAFFLE) answers its baffled calls from that request's recording")
	replayTime := fs.Bool("replay-time", false, "with --trace-ids: also send Retrace-Replay-Time, so the service's clock reads as when the request was recorded")
	var mockAdmins listFlag
	fs.Var(&mockAdmins, "mock-admin", "admin URL of a mock server answering the target's baffled calls (repeatable, comma-separated): its answer times during the run go into the results")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *input == "" || *target == "" || *out == "" {
		return usageError("--input, --target and --out are required")
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	mode, err := load.ParseMode(*modeS)
	if err != nil {
		return usageError("%v", err)
	}
	shard, err := load.ParseShard(*shardS)
	if err != nil {
		return usageError("%v", err)
	}
	cfg := load.Config{Mode: mode, Speed: *speed, Rate: *rate, Duration: *duration, Concurrency: *conc,
		Shard: shard, Stagger: *stagger, StartAt: startAt.t, Target: *target, Input: *input}
	if *rampS != "" {
		if cfg.Ramp, err = load.ParseRamp(*rampS); err != nil {
			return usageError("%v", err)
		}
		if *duration <= 0 {
			return usageError("--ramp needs --duration")
		}
	}
	if mode == load.ModeRate && *rate <= 0 && *rampS == "" {
		return usageError("--mode rate needs --rate N or --ramp A:B")
	}
	switch {
	case *speed <= 0:
		return usageError("--speed %v: want > 0", *speed)
	case *conc < 0:
		return usageError("--concurrency %d: want at least 1 (or 0 for the mode's default)", *conc)
	case *rate < 0:
		return usageError("--rate %v: want > 0", *rate)
	case *duration < 0:
		return usageError("--duration %v: want > 0 (or 0: until the input ends)", *duration)
	case *timeout <= 0:
		return usageError("--timeout %v: want > 0", *timeout)
	case *stagger < 0:
		return usageError("--stagger %v: want 0 or more", *stagger)
	case *failStatus < 100 || *failStatus > 999:
		return usageError("--fail-status %d: want an HTTP status (100-999)", *failStatus)
	}
	switch *progress {
	case "auto", "live", "log", "off":
	default:
		return usageError("--progress %q: want auto, live, log or off", *progress)
	}
	cfg.Once = *once

	if p.Getenv("GOGC") == "" {
		// The generator's live heap is small and its garbage per request
		// constant: collecting less often saves CPU at a bounded cost in
		// memory (a few times the live heap).
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	execConc := *conc
	if execConc <= 0 {
		execConc = 256
	}
	if *replayTime && !*traceIDs {
		return usageError("--replay-time needs --trace-ids")
	}
	exec, err := load.NewExecutor(*target, load.ExecutorConfig{Concurrency: execConc, Timeout: *timeout, FailStatus: *failStatus,
		Traces: *traceIDs, ReplayTime: *replayTime})
	if err != nil {
		return usageError("%v", err)
	}
	defer exec.Close()
	cfg.Executor = exec

	in, err := objstore.OpenFile(ctx, *input, p.Stdin)
	if err != nil {
		return usageError("--input %s: %v", *input, err)
	}
	defer in.Close()
	inName := *input
	if inName == "-" {
		inName = "stdin"
	}
	if *input != "-" {
		// Passes after the first read the input again rather than keep
		// it in memory (stdin cannot be read twice: it is kept).
		var again []io.Closer
		defer func() {
			for _, c := range again {
				c.Close()
			}
		}()
		cfg.Rewind = func() (*load.Reader, error) {
			f, err := objstore.OpenFile(ctx, *input, nil)
			if err != nil {
				return nil, err
			}
			again = append(again, f)
			return load.NewReader(f, inName), nil
		}
	}
	dir, err := objstore.OpenDir(ctx, *out)
	if err != nil {
		return err
	}
	defer dir.Close()
	sub := shard.Name()
	ts, err := dir.Create(ctx, path.Join(sub, load.TimeseriesFile))
	if err != nil {
		return err
	}
	errs, err := dir.Create(ctx, path.Join(sub, load.ErrorsFile))
	if err != nil {
		ts.Close()
		return err
	}
	cfg.Timeseries, cfg.Errors = ts, errs
	badShown := 0
	cfg.OnBadLine = func(e *load.LineError) {
		if badShown < 20 {
			badShown++
			fmt.Fprintf(p.Stderr, "load: skipped %v\n", e)
		}
	}
	pr := newProgressPrinter(p.Stderr, *progress)
	if pr != nil {
		cfg.Progress, cfg.ProgressEvery = pr.print, pr.every
	}

	watch, err := load.WatchMocks(ctx, mockAdmins)
	if err != nil {
		ts.Close()
		errs.Close()
		return err
	}
	res, runErr := load.Run(ctx, cfg, load.NewReader(in, inName))
	closeErr := errors.Join(ts.Close(), errs.Close())
	if res == nil {
		return errors.Join(runErr, closeErr)
	}
	if res.Mock, err = watch.Stop(context.WithoutCancel(ctx)); err != nil {
		closeErr = errors.Join(closeErr, err)
	}
	rw, err := dir.Create(ctx, path.Join(sub, load.ResultsFile))
	if err != nil {
		return errors.Join(runErr, err)
	}
	err = load.WriteResults(rw, res)
	err = errors.Join(err, rw.Close(), closeErr)
	t := res.Total
	fmt.Fprintf(p.Stderr, "load: shard %s: %d sent, %d errors, %.1f req/s over %.1fs, p50 %.2fms p99 %.2fms max %.2fms; results in %s\n",
		res.Shard, res.Sent, t.Errors, float64(t.Count)/res.Ended.Sub(res.Started).Seconds(), res.Ended.Sub(res.Started).Seconds(),
		t.P50Ms, t.P99Ms, t.MaxMs, dir.Path(sub))
	for _, m := range res.Mock {
		fmt.Fprintf(p.Stderr, "load: mock %s: %d answers, p50 %.1fµs p99 %.1fµs max %.1fµs per answer\n",
			m.Admin, m.Answers, m.P50Us, m.P99Us, m.MaxUs)
	}
	if res.Late > 0 {
		fmt.Fprintf(p.Stderr, "load: %d requests were sent more than %v after their intended time (raise --concurrency or add shards); their latency counts from the intended time\n",
			res.Late, load.LateAfter)
	}
	return loadVerdict(res, runErr, err, *input, maxErr)
}

// loadVerdict maps a finished load run to its exit status: written
// results that say nothing (no valid input line, nothing sent), an
// interrupted run and a crossed error rate are not a success.
func loadVerdict(res *load.Results, runErr, writeErr error, input string, maxErr float64) error {
	if res.Incomplete != "" && errors.Is(runErr, context.Canceled) {
		return errors.Join(failed("interrupted after %d requests: results are marked incomplete and cover the requests sent so far", res.Sent), writeErr)
	}
	if err := errors.Join(runErr, writeErr); err != nil {
		return err
	}
	t := res.Total
	switch {
	case res.Lines == 0:
		return usageError("--input %s: no valid request line (%d lines did not decode); nothing was sent", input, res.BadLines)
	case res.Sent == 0:
		return failed("shard %s sent no request (the input has %d; the shard owns none of them, or the duration ended first)", res.Shard, res.Lines)
	case t.Count > 0 && t.Errors == t.Count:
		return failed("every request failed (%d of %d); see %s", t.Errors, t.Count, load.ErrorsFile)
	case maxErr >= 0 && t.Count > 0 && float64(t.Errors)/float64(t.Count) > maxErr:
		return failed("error rate %.2f%% exceeds --max-error-rate %.2f%% (%d of %d requests failed)",
			100*float64(t.Errors)/float64(t.Count), 100*maxErr, t.Errors, t.Count)
	}
	return nil
}

// progressPrinter shows a run's progress: a line redrawn in place on a
// terminal, or a log line now and then elsewhere.
type progressPrinter struct {
	mu    sync.Mutex
	w     io.Writer
	live  bool
	every time.Duration
}

func newProgressPrinter(w io.Writer, mode string) *progressPrinter {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	switch mode {
	case "off":
		return nil
	case "live":
		return &progressPrinter{w: w, live: true, every: 250 * time.Millisecond}
	case "log":
		return &progressPrinter{w: w, every: 10 * time.Second}
	default:
		if tty {
			return &progressPrinter{w: w, live: true, every: 250 * time.Millisecond}
		}
		return &progressPrinter{w: w, every: 10 * time.Second}
	}
}

func (pp *progressPrinter) print(pg load.Progress) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	errPct := 0.0
	if pg.Done > 0 {
		errPct = 100 * float64(pg.Errors) / float64(pg.Done)
	}
	line := fmt.Sprintf("%7.1fs  sent %d  done %d  errors %d (%.2f%%)  rate %.1f/s  p99 %s",
		pg.Elapsed.Seconds(), pg.Sent, pg.Done, pg.Errors, errPct, pg.Rate, pg.P99.Round(10*time.Microsecond))
	switch {
	case pp.live && pg.Final:
		fmt.Fprintf(pp.w, "\r\033[K")
	case pp.live:
		fmt.Fprintf(pp.w, "\r\033[K%s", line)
	case !pg.Final:
		fmt.Fprintf(pp.w, "load: %s\n", line)
	}
}

// listFlag is a repeatable flag of comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}
