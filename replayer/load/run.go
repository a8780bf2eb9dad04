package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one load run (one shard).
type Config struct {
	// Mode is the pacing strategy; empty means ModeOriginal.
	Mode Mode
	// Speed divides recorded gaps in ModeOriginal; zero means 1.
	Speed float64
	// Rate is the total request rate per second of all shards together in
	// ModeRate (each shard sends its share); ignored when Ramp is set.
	Rate float64
	// Ramp, when From or To is non-zero, changes the rate of ModeRate
	// linearly over Duration.
	Ramp Ramp
	// Duration stops the run: no request is sent whose intended time is
	// later (in ModeMax: after it has elapsed). Zero means until the input
	// ends. In ModeRate (fixed or ramp) an input that ends before Duration
	// is sent again, in order, until Duration ends, unless Once is set.
	Duration time.Duration
	// Once stops a ModeRate run at the end of its input even when Duration
	// is longer.
	Once bool
	// Rewind, when set, opens the input again from its start, for the
	// passes after the first (see Duration). Nil keeps this shard's
	// requests in memory during the first pass instead, when a repeat may
	// be needed.
	Rewind func() (*Reader, error)
	// Concurrency bounds requests in flight. In ModeMax exactly this many
	// workers send back to back; zero means 32. In the paced modes workers
	// are added as needed up to this bound; zero means 10000. When the bound
	// is reached, sends queue, and their latency still counts from their
	// intended time.
	Concurrency int
	// Shard selects this run's part of the input; the zero value is all.
	Shard Shard
	// Stagger spreads the starts of shards: shard I starts I·Stagger/N
	// later. Zero means 10ms.
	Stagger time.Duration
	// StartAt, when set, is the common start of all shards (so that shards
	// started by a scheduler at slightly different times keep their
	// offsets); the run waits until then. Zero means now.
	StartAt time.Time
	// Executor runs the requests. Required.
	Executor Executor
	// Target and Input are copied into the results, for the reader.
	Target, Input string
	// Timeseries receives timeseries.jsonl and Errors errors.jsonl; nil
	// writes none.
	Timeseries, Errors io.Writer
	// OnBadLine is called for every input line that does not decode; nil
	// ignores them (they are counted in Results.BadLines either way).
	OnBadLine func(*LineError)
	// Progress, when set, is called every ProgressEvery (zero means 1s)
	// from a goroutine of the run, and once at the end.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress is a live view of a run.
type Progress struct {
	Elapsed time.Duration
	Sent    int64
	Done    int64
	Errors  int64
	Rate    float64       // completions per second over the last interval
	P99     time.Duration // over everything completed so far
	Final   bool          // the last call, after the run ended
}

// job is one request handed to a worker.
type job struct {
	req      *Request
	intended time.Time // zero in ModeMax: measured from the send
}

// run is the state of one Run call.
type run struct {
	cfg     Config
	rec     *recorder
	reqCtx  context.Context // requests finish even when the run is stopped
	sent    atomic.Int64
	done    atomic.Int64
	errors  atomic.Int64
	late    atomic.Int64
	jobs    chan job
	workers sync.WaitGroup
	nwork   int
}

// Run replays the requests of in as cfg says and returns what it measured.
// It stops sending when ctx is cancelled, lets requests in flight finish
// (each bounded by the executor's timeout) and returns the results so far
// together with ctx's error.
func Run(ctx context.Context, cfg Config, in *Reader) (*Results, error) {
	if cfg.Executor == nil {
		return nil, errors.New("load: no executor")
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeOriginal
	}
	if cfg.Stagger == 0 {
		cfg.Stagger = 10 * time.Millisecond
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 10000
		if cfg.Mode == ModeMax {
			cfg.Concurrency = 32
		}
	}
	sched, err := cfg.schedule()
	if err != nil {
		return nil, err
	}
	r := &run{
		cfg:    cfg,
		rec:    newRecorder(cfg.Timeseries, cfg.Errors, cfg.Shard.String()),
		reqCtx: context.WithoutCancel(ctx),
	}
	if cfg.Mode == ModeMax {
		// The workers take a request when they are free and measure from
		// then, so a buffer changes no latency; it lets the reader run ahead
		// in batches instead of switching goroutines for every request.
		r.jobs = make(chan job, min(cfg.Concurrency, 1024))
	} else {
		// Unbuffered: a send that blocks means every worker is busy, which
		// is when handOff adds one.
		r.jobs = make(chan job)
	}
	res := &Results{V: ResultsVersion, Shard: cfg.Shard.String(), Mode: cfg.Mode, Target: cfg.Target, Input: cfg.Input}

	start := time.Now()
	if !cfg.StartAt.IsZero() {
		// A start in the past would make the shard send its backlog at once
		// and count the delay as latency: refuse it.
		if late := start.Sub(cfg.StartAt); late > time.Second {
			return nil, fmt.Errorf("load: start time %s passed %v ago (give a time ahead of all shards' start)",
				cfg.StartAt.Format(time.RFC3339), late.Round(time.Second))
		}
		start = cfg.StartAt
	}
	start = start.Add(cfg.Shard.Offset(cfg.Stagger))
	res.Started = start
	if err := sleepUntil(ctx, start); err != nil {
		res.Ended = time.Now()
		res.Incomplete = "interrupted before the start"
		return res, errors.Join(err, r.rec.finish(res))
	}

	stopProgress := r.startProgress(start)
	if cfg.Mode == ModeMax {
		r.addWorkers(cfg.Concurrency)
	} else {
		r.addWorkers(min(cfg.Concurrency, 16))
	}
	runErr := r.dispatch(ctx, in, sched, start, res)
	if runErr != nil && ctx.Err() != nil {
		res.Incomplete = "interrupted"
	}
	close(r.jobs)
	r.workers.Wait()
	res.Ended = time.Now()
	stopProgress()

	res.Sent = r.sent.Load()
	res.Late = r.late.Load()
	if err := r.rec.finish(res); err != nil {
		return res, errors.Join(runErr, err)
	}
	return res, runErr
}

func (c *Config) schedule() (Schedule, error) {
	switch c.Mode {
	case ModeOriginal:
		return OriginalSchedule(c.Speed, c.Duration), nil
	case ModeRate:
		if c.Ramp.From != 0 || c.Ramp.To != 0 {
			if c.Duration <= 0 && c.Ramp.From != c.Ramp.To {
				return nil, errors.New("load: a ramp needs a duration")
			}
			return RampSchedule(c.Ramp, c.Duration), nil
		}
		if c.Rate <= 0 {
			return nil, fmt.Errorf("load: rate mode needs a rate > 0 (got %g)", c.Rate)
		}
		return RateSchedule(c.Rate, c.Duration), nil
	case ModeMax:
		return nil, nil
	}
	return nil, fmt.Errorf("load: unknown mode %q", c.Mode)
}

// repeats reports whether the input is sent again when it ends before
// the duration.
func (c *Config) repeats() bool {
	return c.Mode == ModeRate && c.Duration > 0 && !c.Once
}

// dispatch reads the input and hands this shard's requests to the workers
// at their intended times, starting the input over while the schedule
// goes on (see Config.Duration).
func (r *run) dispatch(ctx context.Context, in *Reader, sched Schedule, start time.Time, res *Results) error {
	d := &dispatcher{run: r, sched: sched, start: start, res: res, wait: newWaiter()}
	defer d.wait.stop()
	if r.cfg.Mode == ModeMax && r.cfg.Duration > 0 {
		d.deadline = start.Add(r.cfg.Duration)
	}
	keep := r.cfg.repeats() && r.cfg.Rewind == nil
	for pass := 0; ; pass++ {
		res.Passes = pass + 1
		var lines int64
		var err error
		switch {
		case pass == 0:
			lines, err = d.read(ctx, in, true, keep)
		case keep:
			lines, err = d.replayKept(ctx)
		default:
			next, rerr := r.cfg.Rewind()
			if rerr != nil {
				return fmt.Errorf("load: opening the input again for pass %d: %w", pass+1, rerr)
			}
			lines, err = d.read(ctx, next, false, false)
		}
		if err != nil || d.over {
			return err
		}
		if pass == 0 {
			d.perPass = lines
		}
		if !r.cfg.repeats() || lines == 0 || d.perPass == 0 {
			return nil
		}
	}
}

// dispatcher is the state of dispatch across passes over the input.
type dispatcher struct {
	*run
	sched    Schedule
	start    time.Time
	deadline time.Time
	res      *Results
	wait     *waiter
	first    time.Time // recorded time of the input's first request
	// pass is the number of passes done; perPass the valid requests of
	// one: a request's index in the whole run is pass·perPass + its index
	// in the pass, which the schedule paces, while the shard owns requests
	// by their index in the pass (every pass sends the same ones).
	pass, perPass int64
	kept          []keptRequest
	over          bool // the schedule or the deadline ended the run
}

type keptRequest struct {
	index int64 // in the pass
	req   *Request
}

// read sends one pass of in and returns its valid requests.
func (d *dispatcher) read(ctx context.Context, in *Reader, firstPass, keep bool) (int64, error) {
	var index int64
	for {
		req := new(Request)
		err := in.Next(req)
		if errors.Is(err, io.EOF) {
			d.pass++
			return index, nil
		}
		var le *LineError
		if errors.As(err, &le) {
			if firstPass {
				d.res.BadLines++
				if d.cfg.OnBadLine != nil {
					d.cfg.OnBadLine(le)
				}
			}
			continue
		}
		if err != nil {
			return index, err
		}
		i := index
		index++
		if firstPass {
			d.res.Lines++
			if i == 0 {
				d.first = req.At
			}
		}
		if !d.cfg.Shard.Owns(i) {
			continue
		}
		if keep {
			d.kept = append(d.kept, keptRequest{i, req})
		}
		if err := d.send(ctx, i, req); err != nil || d.over {
			return index, err
		}
	}
}

// replayKept sends the requests kept in the first pass once more.
func (d *dispatcher) replayKept(ctx context.Context) (int64, error) {
	for _, k := range d.kept {
		if err := d.send(ctx, k.index, k.req); err != nil || d.over {
			return d.perPass, err
		}
	}
	d.pass++
	return d.perPass, nil
}

// send waits for the intended time of the request at index i of the
// current pass and hands it to a worker.
func (d *dispatcher) send(ctx context.Context, i int64, req *Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := job{req: req}
	if d.sched != nil {
		off, ok := d.sched.At(d.pass*d.perPass+i, req.At, d.first)
		if !ok {
			d.over = true
			return nil
		}
		j.intended = d.start.Add(off)
		if err := d.wait.until(ctx, j.intended); err != nil {
			return err
		}
	} else if !d.deadline.IsZero() && !time.Now().Before(d.deadline) {
		d.over = true
		return nil
	}
	d.res.Owned++
	return d.handOff(ctx, j)
}

// handOff gives j to an idle worker, adding one while under the bound.
func (r *run) handOff(ctx context.Context, j job) error {
	select {
	case r.jobs <- j:
		return nil
	default:
	}
	if r.nwork < r.cfg.Concurrency {
		r.addWorkers(1)
	}
	select {
	case r.jobs <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *run) addWorkers(n int) {
	for range n {
		r.nwork++
		r.workers.Add(1)
		go r.worker()
	}
}

// worker executes jobs until the channel is closed.
func (r *run) worker() {
	defer r.workers.Done()
	for j := range r.jobs {
		sentAt := time.Now()
		intended := j.intended
		if intended.IsZero() {
			intended = sentAt
		} else if sentAt.Sub(intended) > LateAfter {
			r.late.Add(1)
		}
		r.sent.Add(1)
		r.rec.sent()
		o := r.cfg.Executor.Execute(r.reqCtx, j.req)
		now := time.Now()
		d := now.Sub(intended)
		r.done.Add(1)
		if o.Err != nil {
			r.errors.Add(1)
			r.rec.failed(j.req, sentAt, d, o)
		}
		r.rec.done(j.req.APIName(), now, d, o)
	}
}

// startProgress calls cfg.Progress periodically; the returned function
// stops it, waits for it and makes the final call.
func (r *run) startProgress(start time.Time) func() {
	if r.cfg.Progress == nil {
		return func() {}
	}
	every := r.cfg.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	snapshot := func(prevDone int64, prevAt time.Time, final bool) Progress {
		now := time.Now()
		p := Progress{Elapsed: now.Sub(start), Sent: r.sent.Load(), Done: r.done.Load(),
			Errors: r.errors.Load(), P99: r.rec.p99(), Final: final}
		if dt := now.Sub(prevAt).Seconds(); dt > 0 {
			p.Rate = float64(p.Done-prevDone) / dt
		}
		return p
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		prevDone, prevAt := int64(0), time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p := snapshot(prevDone, prevAt, false)
				prevDone, prevAt = p.Done, time.Now()
				r.cfg.Progress(p)
			}
		}
	}()
	return func() {
		close(stop)
		wg.Wait()
		p := snapshot(0, start, true) // final: the average rate over the run
		r.cfg.Progress(p)
	}
}

// waiter sleeps until given times with one reusable timer (a timer per
// request would cost an allocation and a heap operation each).
type waiter struct{ t *time.Timer }

func newWaiter() *waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{t: t}
}

func (w *waiter) until(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	w.t.Reset(d) // since Go 1.23 Reset needs no drain: a stopped timer's channel is empty
	select {
	case <-w.t.C:
		return nil
	case <-ctx.Done():
		w.t.Stop()
		return ctx.Err()
	}
}

func (w *waiter) stop() { w.t.Stop() }

// sleepUntil waits until t or until ctx is done.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
