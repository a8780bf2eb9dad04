package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/analyze"
	"github.com/retrace-dev/retrace/replayer/extract"
	"github.com/retrace-dev/retrace/replayer/load"
)

// LoadResult is the demo's load replay.
type LoadResult struct {
	Requests string // the extracted timed requests (JSONL)
	Results  string // the results directory (one shard)
	Summary  *analyze.Summary
}

// Extract writes the inbound requests of the recordings in dir to out as
// timed-request JSONL, ordered by time (pipeline step 1).
func Extract(ctx context.Context, dir, out string) (extract.Stats, error) {
	f, err := os.Create(out)
	if err != nil {
		return extract.Stats{}, err
	}
	src := &extract.Recordings{Name: dir, Open: func(ctx context.Context, onBad func(error)) (extract.SessionReader, error) {
		return recording.Open(ctx, dir, recording.WithErrorHandler(onBad))
	}}
	st, err := extract.Extract(ctx, src, load.NewWriter(f), extract.Options{})
	return st, errors.Join(err, f.Close())
}

// Load replays the timed requests in input against target at speed times
// the recorded pace and writes the results of one shard under dir
// (pipeline step 3).
func Load(ctx context.Context, input, target, dir string, speed float64) (*load.Results, error) {
	in, err := os.Open(input)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	exec, err := load.NewExecutor(target, load.ExecutorConfig{Concurrency: 64, Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer exec.Close()
	shardDir := filepath.Join(dir, load.Shard{}.Name())
	if err := os.MkdirAll(shardDir, 0o755); err != nil {
		return nil, err
	}
	ts, err := os.Create(filepath.Join(shardDir, load.TimeseriesFile))
	if err != nil {
		return nil, err
	}
	defer ts.Close()
	errs, err := os.Create(filepath.Join(shardDir, load.ErrorsFile))
	if err != nil {
		return nil, err
	}
	defer errs.Close()
	cfg := load.Config{Mode: load.ModeOriginal, Speed: speed, Executor: exec, Target: target, Input: input,
		Timeseries: ts, Errors: errs}
	res, runErr := load.Run(ctx, cfg, load.NewReader(in, input))
	if res == nil {
		return nil, runErr
	}
	rf, err := os.Create(filepath.Join(shardDir, load.ResultsFile))
	if err != nil {
		return nil, errors.Join(runErr, err)
	}
	err = load.WriteResults(rf, res)
	return res, errors.Join(runErr, err, rf.Close(), ts.Close(), errs.Close())
}

func (d *demo) load(ctx context.Context) error {
	d.step(8, fmt.Sprintf("Load replay: the recorded traffic at %g× its pace", d.opt.Speed))
	if err := d.dn.Restart(); err != nil {
		return err
	}
	d.say("the downstreams are back; orders runs without the agent (RETRACE_MODE=off)")
	svc, err := d.startService(ctx, "off")
	if err != nil {
		return err
	}
	defer svc.Stop()
	if err := os.MkdirAll(d.res.LoadDir, 0o755); err != nil {
		return err
	}
	lr := &LoadResult{Requests: filepath.Join(d.res.LoadDir, "requests.jsonl"), Results: filepath.Join(d.res.LoadDir, "results")}
	d.res.Load = lr
	st, err := Extract(ctx, d.res.Recordings, lr.Requests)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	d.say("extract: %d timed requests, in time order, to %s", st.Written, lr.Requests)
	res, err := Load(ctx, lr.Requests, svc.URL(), lr.Results, d.opt.Speed)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	d.say("load: %d requests sent in %.1fs (recorded over %v), latency counted from each request's intended send time",
		res.Sent, res.Ended.Sub(res.Started).Seconds(), d.opt.Spread)
	run, err := analyze.Load(ctx, lr.Results)
	if err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	rep := analyze.NewReport(run, nil, analyze.NoThresholds())
	lr.Summary = rep.Summary
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		d.say("%s", l)
	}
	return nil
}
