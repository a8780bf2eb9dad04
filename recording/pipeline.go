package recording

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrace-dev/retrace/internal/stripe"
	fastutf8 "github.com/segmentio/asm/utf8"
)

// Defaults of PipelineConfig.
const (
	// DefaultBufferBytes bounds what waits for the store: with a store that
	// is down, the service holds at most this much of sessions (plus what
	// the sessions in progress hold) and drops, counted and logged, beyond.
	DefaultBufferBytes = 32 << 20
	DefaultBatchSize   = 256
	// DefaultFlushInterval is short so a service stopped without
	// patches.Stop loses little; a flush is one write call, and only when
	// something was written.
	DefaultFlushInterval = 100 * time.Millisecond
	DefaultMaxPayload    = 1 << 20
	// DefaultRetryMin and DefaultRetryMax bound the wait between attempts
	// to write to a store that fails: it doubles from the first to the
	// second and starts again at the first once a write succeeds.
	DefaultRetryMin = 50 * time.Millisecond
	DefaultRetryMax = 5 * time.Second
	// DefaultWriteTimeout bounds one Write or Flush call of the store (the
	// context it is given); a store frozen for longer fails the call,
	// which is retried.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultReportInterval is how often drops and store failures are
	// logged after the first of them, which is logged at once.
	DefaultReportInterval = 10 * time.Second
)

// sessionOverhead is what a session costs the buffer beyond its payloads:
// its structs, strings and queue slot, about.
const sessionOverhead = 512

// Cost is what the session s counts against PipelineConfig.BufferBytes:
// its payloads and a fixed overhead per session and per call.
func Cost(s *Session) int64 {
	n := int64(sessionOverhead + len(s.Inbound.Request) + len(s.Inbound.Response))
	for i := range s.Calls {
		n += int64(64 + len(s.Calls[i].Request) + len(s.Calls[i].Response))
	}
	return n
}

// drainInterval is how often the writer takes what is queued when fewer
// than a batch of sessions wait. Submit wakes it only for a full batch, so
// a busy service does not pay a goroutine wake-up (and, with idle Ps, a
// thread wake-up) per recorded request.
const drainInterval = 20 * time.Millisecond

// PipelineConfig configures a Pipeline.
type PipelineConfig struct {
	// Store receives the sessions; the pipeline owns it and closes it in
	// Close. Required.
	Store Writer
	// Sampler decides which requests are recorded. The zero value records
	// none; use NewSampler(1) to record all.
	Sampler Sampler
	// Mask is applied to every payload before the session is written. Nil
	// masks nothing.
	Mask *Masker
	// MaxPayload caps every payload (bytes kept, the rest dropped and the
	// session marked truncated). Zero means DefaultMaxPayload; negative
	// means no cap.
	MaxPayload int
	// BufferBytes bounds the sessions submitted and not yet stored, by
	// their Cost: those queued and those the writer holds while the store
	// fails. Submit drops a session that does not fit. Zero means
	// DefaultBufferBytes.
	BufferBytes int64
	// QueueSize bounds the same sessions by number. Zero means
	// BufferBytes/512, a bound the byte budget always reaches first.
	QueueSize int
	// BatchSize is the most sessions handed to Store.Write at once. Zero
	// means DefaultBatchSize.
	BatchSize int
	// FlushInterval is how often the writer flushes the store while
	// sessions arrive. Zero means DefaultFlushInterval.
	FlushInterval time.Duration
	// RetryMin and RetryMax bound the backoff between attempts to write to
	// a failing store. Zero means DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// WriteTimeout bounds each call of the store. Zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Logger receives, at level Error, the first drop and the first store
	// failure at once and then, every ReportInterval while they go on, how
	// many more; and a line when the store works again. Nil logs nothing
	// (the counters count regardless).
	Logger *slog.Logger
	// ReportInterval is how often Logger hears of drops and failures after
	// the first. Zero means DefaultReportInterval.
	ReportInterval time.Duration
	// ErrorLog receives every error of the store, unthrottled. Nil
	// discards them (they are counted, and Logger reports them).
	ErrorLog func(error)
	// Decode, when set, gives each call whose request is not UTF-8 text
	// its decoded form (Call.Decoded; "" for none), on the writer, after
	// masking and capping. capture.Decode is the wire protocols'.
	Decode func(proto string, request []byte) string
}

// Stats are the pipeline's counters.
type Stats struct {
	Seen        int64 `json:"seen"`         // requests offered to Sample
	Sampled     int64 `json:"sampled"`      // requests Sample chose
	Recorded    int64 `json:"recorded"`     // sessions the store took
	Dropped     int64 `json:"dropped"`      // sessions lost, all reasons: the three below
	BufferFull  int64 `json:"buffer_full"`  // dropped by Submit: no room in BufferBytes
	Abandoned   int64 `json:"abandoned"`    // dropped at or after Close: submitted late, or Close's ctx ended first
	Rejected    int64 `json:"rejected"`     // dropped because the store refused them for good (ErrRejected)
	Masked      int64 `json:"masked"`       // sessions in which masking changed a payload
	MaskSkipped int64 `json:"mask_skipped"` // payloads masking could not read (see Masker), kept as recorded
	Truncated   int64 `json:"truncated"`    // sessions with a payload cut at MaxPayload
	WriteErrors int64 `json:"write_errors"` // failed Write or Flush calls of the store (each retried)
	Buffered    int64 `json:"buffered"`     // bytes (Cost) of sessions submitted and not yet stored
}

// Pipeline is the record side's way to the store: Sample once per request,
// Submit finished sessions; a background writer masks, caps and writes them
// in batches, and retries, with backoff, while the store fails. Submit
// never blocks: when the buffer is full the session is dropped, counted
// and logged.
type Pipeline struct {
	cfg      PipelineConfig
	queue    chan *Session
	kick     chan struct{} // a full batch waits
	flushes  chan chan error
	stop     chan struct{} // closed by Close: write what is queued, then end
	abandon  chan struct{} // closed by Close when its ctx ends: drop what is queued
	done     chan struct{} // closed by the writer when it ends
	closed   atomic.Bool
	once     sync.Once
	closeErr error

	// seen and sampled are added to by every request, on every core
	seen, sampled stripe.Counter
	buffered      atomic.Int64 // Cost of the sessions submitted and not yet stored or dropped

	recorded, bufferFull, abandoned, rejected   atomic.Int64
	masked, maskSkipped, truncated, writeErrors atomic.Int64

	drops, failures report
	maskSkipLogged  atomic.Bool
}

// NewPipeline starts a pipeline and its writer goroutine; Close ends it.
func NewPipeline(cfg PipelineConfig) (*Pipeline, error) {
	if cfg.Store == nil {
		return nil, errors.New("recording: pipeline needs a store")
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if cfg.BufferBytes <= 0 {
		cfg.BufferBytes = DefaultBufferBytes
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = int(max(1, cfg.BufferBytes/sessionOverhead))
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(cfg.RetryMin, DefaultRetryMax)
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = func(error) {}
	}
	p := &Pipeline{
		cfg:     cfg,
		queue:   make(chan *Session, cfg.QueueSize),
		kick:    make(chan struct{}, 1),
		flushes: make(chan chan error),
		stop:    make(chan struct{}),
		abandon: make(chan struct{}),
		done:    make(chan struct{}),
	}
	p.drops = report{log: cfg.Logger, every: cfg.ReportInterval, msg: "retrace: sessions dropped, not recorded"}
	p.failures = report{log: cfg.Logger, every: cfg.ReportInterval, msg: "retrace: writing sessions to the store failed; retrying"}
	go (&pipelineWriter{p: p, backoff: cfg.RetryMin}).run()
	return p, nil
}

// Sample decides whether the current request is recorded; call it once per
// request. It does not allocate.
func (p *Pipeline) Sample() bool {
	p.seen.Add(1)
	if !p.cfg.Sampler.Sample() {
		return false
	}
	p.sampled.Add(1)
	return true
}

// Submit queues a finished session for writing and reports whether it was
// queued. It never blocks; the pipeline owns s from now on.
func (p *Pipeline) Submit(s *Session) bool {
	if p.closed.Load() {
		p.drop(&p.abandoned, 1, "pipeline closed")
		return false
	}
	cost := Cost(s)
	if p.buffered.Add(cost) > p.cfg.BufferBytes {
		p.buffered.Add(-cost)
		p.drop(&p.bufferFull, 1, "buffer full")
		return false
	}
	select {
	case p.queue <- s:
		if len(p.queue) >= p.cfg.BatchSize {
			select {
			case p.kick <- struct{}{}:
			default:
			}
		}
		return true
	default:
		p.buffered.Add(-cost)
		p.drop(&p.bufferFull, 1, "buffer full")
		return false
	}
}

// drop counts n sessions lost for reason (in the counter c) and reports
// them, rate-limited.
func (p *Pipeline) drop(c *atomic.Int64, n int64, reason string) {
	c.Add(n)
	p.drops.add(n, "reason", reason, "dropped_total", p.dropped(),
		"buffered_bytes", p.buffered.Load(), "buffer_bytes", p.cfg.BufferBytes)
}

func (p *Pipeline) dropped() int64 {
	return p.bufferFull.Load() + p.abandoned.Load() + p.rejected.Load()
}

// MaxPayload returns the payload cap (negative: none), so that capture can
// stop buffering bytes it would drop anyway.
func (p *Pipeline) MaxPayload() int { return p.cfg.MaxPayload }

// Stats returns the counters.
func (p *Pipeline) Stats() Stats {
	return Stats{Seen: p.seen.Load(), Sampled: p.sampled.Load(), Recorded: p.recorded.Load(),
		Dropped: p.dropped(), BufferFull: p.bufferFull.Load(), Abandoned: p.abandoned.Load(),
		Rejected: p.rejected.Load(), Masked: p.masked.Load(), MaskSkipped: p.maskSkipped.Load(),
		Truncated: p.truncated.Load(), WriteErrors: p.writeErrors.Load(), Buffered: p.buffered.Load()}
}

// Flush writes every queued session and flushes the store. While the
// store fails it returns the store's error (the writer keeps retrying).
func (p *Pipeline) Flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case p.flushes <- reply:
	case <-p.done:
		return errors.New("recording: pipeline closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting sessions, writes what is queued (retrying while the
// store fails), flushes and closes the store. When ctx ends first, what is
// still waiting is dropped and counted, and Close returns without closing
// the store (a Write may still be in progress; the writer ends when it
// returns). Safe to call twice.
func (p *Pipeline) Close(ctx context.Context) error {
	p.once.Do(func() {
		p.closed.Store(true)
		close(p.stop)
		select {
		case <-p.done:
			p.closeErr = p.cfg.Store.Close()
		case <-ctx.Done():
			close(p.abandon)
			p.closeErr = fmt.Errorf("recording: pipeline close: store not closed: %w", ctx.Err())
		}
		p.drops.flush()
		p.failures.flush()
	})
	return p.closeErr
}

// report logs an event that may repeat very often: the first at once,
// then how many more every interval while they go on.
type report struct {
	log   *slog.Logger
	every time.Duration
	msg   string

	mu      sync.Mutex
	next    time.Time // when the next line may be logged
	pending int64     // events since the last line
	total   int64
	attrs   []any // of the latest event
}

func (r *report) add(n int64, attrs ...any) {
	if r.log == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	r.pending += n
	r.total += n
	r.attrs = attrs
	if now.Before(r.next) {
		r.mu.Unlock()
		return
	}
	r.next = now.Add(r.every)
	r.logLocked()
	r.mu.Unlock()
}

// tick logs what came since the last line, once the interval is over.
func (r *report) tick(now time.Time) {
	if r.log == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending > 0 && !now.Before(r.next) {
		r.next = now.Add(r.every)
		r.logLocked()
	}
}

// flush logs what came since the last line, now.
func (r *report) flush() {
	if r.log == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending > 0 {
		r.logLocked()
	}
}

func (r *report) logLocked() {
	r.log.Error(r.msg, append([]any{"count", r.pending, "total", r.total, "report_every", r.every.String()}, r.attrs...)...)
	r.pending = 0
}

// pipelineWriter is the goroutine that writes sessions to the store.
type pipelineWriter struct {
	p       *Pipeline
	batch   []*Session
	dirty   bool          // written since the last flush
	failing error         // the store's last error, while it fails
	backoff time.Duration // the next wait after a failure
}

func (w *pipelineWriter) run() {
	p := w.p
	defer close(p.done)
	// While sessions arrive the writer does not wait on the queue itself:
	// a receiver waiting on it would be woken by every Submit. It drains
	// the queue when kicked (a batch is waiting) and every drainInterval,
	// and flushes what it wrote every FlushInterval. With nothing queued
	// and nothing to flush it waits on the queue with no timer running,
	// so an idle service pays no wake-ups, and the first session wakes it.
	interval := min(drainInterval, p.cfg.FlushInterval)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	ticking := true
	lastFlush := time.Now()
	for {
		idle := !w.dirty && len(p.queue) == 0
		if idle == ticking {
			if idle {
				tick.Stop()
			} else {
				tick.Reset(interval)
			}
			ticking = !idle
		}
		var idleQueue <-chan *Session // the queue, waited on only when idle
		if idle {
			idleQueue = p.queue
		}
		select {
		case s := <-idleQueue:
			w.collect(s)
		case <-p.kick:
			w.drain()
		case now := <-tick.C:
			w.drain()
			if w.dirty && now.Sub(lastFlush) >= p.cfg.FlushInterval {
				_ = w.flush()
				lastFlush = now
			}
			p.drops.tick(now)
			p.failures.tick(now)
		case reply := <-p.flushes:
			w.drain()
			reply <- w.flush()
		case <-p.stop:
			w.drain()
			for w.flush() != nil && w.wait() {
			}
			return
		}
	}
}

// collect writes s and whatever else is queued, up to a batch.
func (w *pipelineWriter) collect(s *Session) {
	w.batch = append(w.batch[:0], s)
	for len(w.batch) < w.p.cfg.BatchSize {
		select {
		case s := <-w.p.queue:
			w.batch = append(w.batch, s)
			continue
		default:
		}
		break
	}
	w.write()
}

// drain writes everything queued now, or drops and counts it once Close
// has given up waiting.
func (w *pipelineWriter) drain() {
	for {
		if w.abandoned() {
			for {
				select {
				case s := <-w.p.queue:
					w.p.buffered.Add(-Cost(s))
					w.p.drop(&w.p.abandoned, 1, "close timed out")
				default:
					return
				}
			}
		}
		select {
		case s := <-w.p.queue:
			w.collect(s)
		default:
			return
		}
	}
}

func (w *pipelineWriter) abandoned() bool {
	select {
	case <-w.p.abandon:
		return true
	default:
		return false
	}
}

// write masks and caps the batch and writes it, retrying while the store
// fails, until it is stored or Close gives up.
func (w *pipelineWriter) write() {
	p := w.p
	var cost int64
	for _, s := range w.batch {
		cost += Cost(s) // before masking and the cap change it
		if p.cfg.Mask != nil {
			changed, skipped, why := p.cfg.Mask.maskSession(s)
			if changed {
				p.masked.Add(1)
			}
			if skipped > 0 {
				p.maskSkipped.Add(int64(skipped))
				if p.maskSkipLogged.CompareAndSwap(false, true) && p.cfg.Logger != nil {
					p.cfg.Logger.Error("retrace: a payload could not be masked and is recorded as it is; "+
						"such payloads are counted in mask_skipped, this line is logged once", "why", why, "session", s.ID)
				}
			}
		}
		if Cap(s, p.cfg.MaxPayload) {
			p.truncated.Add(1)
		}
		if p.cfg.Decode != nil {
			for i := range s.Calls {
				if c := &s.Calls[i]; c.Decoded == "" && len(c.Request) > 0 && !fastutf8.Valid(c.Request) {
					c.Decoded = p.cfg.Decode(c.Proto, c.Request)
				}
			}
		}
	}
	w.store(w.batch)
	p.buffered.Add(-cost)
	clear(w.batch)
	w.batch = w.batch[:0]
}

// store writes ss until every session is stored, rejected for good, or
// abandoned by Close.
func (w *pipelineWriter) store(ss []*Session) {
	p := w.p
	for len(ss) > 0 {
		if w.abandoned() {
			p.drop(&p.abandoned, int64(len(ss)), "close timed out")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.WriteTimeout)
		err := p.cfg.Store.Write(ctx, ss)
		cancel()
		if err == nil {
			p.recorded.Add(int64(len(ss)))
			w.dirty = true
			w.succeeded()
			return
		}
		var we *WriteError
		if errors.As(err, &we) && we.Stored > 0 {
			n := min(we.Stored, len(ss))
			p.recorded.Add(int64(n))
			w.dirty = true
			ss = ss[n:]
		}
		if errors.Is(err, ErrRejected) {
			if we != nil && len(ss) > 0 { // the store names the first one left
				w.reject(ss[0], err)
				ss = ss[1:]
				continue
			}
			if len(ss) == 1 {
				w.reject(ss[0], err)
				return
			}
			for _, s := range ss { // which one: each on its own
				w.store([]*Session{s})
			}
			return
		}
		w.failed(err, len(ss))
		if !w.wait() {
			p.drop(&p.abandoned, int64(len(ss)), "close timed out")
			return
		}
	}
}

func (w *pipelineWriter) reject(s *Session, err error) {
	w.p.cfg.ErrorLog(err)
	w.p.drop(&w.p.rejected, 1, "rejected by the store: "+err.Error())
}

func (w *pipelineWriter) failed(err error, waiting int) {
	p := w.p
	p.writeErrors.Add(1)
	p.cfg.ErrorLog(err)
	w.failing = err
	p.failures.add(1, "err", err, "sessions_waiting", waiting, "buffered_bytes", p.buffered.Load(), "retry_in", w.backoff.String())
}

func (w *pipelineWriter) succeeded() {
	if w.failing != nil && w.p.cfg.Logger != nil {
		w.p.failures.flush()
		w.p.cfg.Logger.Error("retrace: the recording store works again; sessions kept meanwhile are written",
			"recorded_total", w.p.recorded.Load(), "dropped_total", w.p.dropped())
	}
	w.failing = nil
	w.backoff = w.p.cfg.RetryMin
}

// wait waits before the next attempt, doubling the backoff; it answers
// Flush calls meanwhile with the store's error. It returns false, at once,
// when Close has given up.
func (w *pipelineWriter) wait() bool {
	t := time.NewTimer(w.backoff)
	defer t.Stop()
	w.backoff = min(2*w.backoff, w.p.cfg.RetryMax)
	for {
		select {
		case <-t.C:
			return true
		case <-w.p.abandon:
			return false
		case reply := <-w.p.flushes:
			reply <- fmt.Errorf("recording: the store fails, sessions are kept and retried: %w", w.failing)
		}
	}
}

func (w *pipelineWriter) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), w.p.cfg.WriteTimeout)
	defer cancel()
	if err := w.p.cfg.Store.Flush(ctx); err != nil {
		w.failed(err, 0)
		return err
	}
	w.dirty = false
	if w.failing != nil {
		w.succeeded()
	}
	return nil
}

// Cap cuts every payload of s longer than max bytes (max < 0: no cap),
// marks the payloads it cut, and reports whether any payload of s is now
// marked truncated (by Cap or before, by capture).
func Cap(s *Session, max int) bool {
	cut := false
	capOne := func(p *[]byte, mark *bool) {
		if max >= 0 && len(*p) > max {
			*p = (*p)[:max:max]
			*mark = true
		}
		cut = cut || *mark
	}
	capOne(&s.Inbound.Request, &s.Inbound.RequestTruncated)
	capOne(&s.Inbound.Response, &s.Inbound.ResponseTruncated)
	for i := range s.Calls {
		c := &s.Calls[i]
		capOne(&c.Request, &c.RequestTruncated)
		capOne(&c.Response, &c.ResponseTruncated)
	}
	return cut
}
