package recording

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrace-dev/retrace/internal/stripe"
	fastutf8 "github.com/segmentio/asm/utf8"
)

// Defaults of PipelineConfig.
const (
	DefaultQueueSize = 4096
	DefaultBatchSize = 256
	// DefaultFlushInterval is short so a service stopped without
	// patches.Stop (a plain SIGTERM) loses at most about the last 120ms of
	// sessions (the interval, plus up to one drainInterval); a flush is one
	// write call, and only when something was written.
	DefaultFlushInterval = 100 * time.Millisecond
	DefaultMaxPayload    = 1 << 20
)

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
	// QueueSize bounds the sessions waiting for the writer; when it is full
	// Submit drops. Zero means DefaultQueueSize.
	QueueSize int
	// BatchSize is the most sessions handed to Store.Write at once. Zero
	// means DefaultBatchSize.
	BatchSize int
	// FlushInterval is how often the writer flushes the store while
	// sessions arrive. Zero means DefaultFlushInterval.
	FlushInterval time.Duration
	// ErrorLog receives write errors. Nil discards them (they are counted).
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
	Recorded    int64 `json:"recorded"`     // sessions written to the store
	Dropped     int64 `json:"dropped"`      // sessions dropped: queue full, or pipeline closed
	Masked      int64 `json:"masked"`       // sessions in which masking changed a payload
	Truncated   int64 `json:"truncated"`    // sessions with a payload cut at MaxPayload
	WriteErrors int64 `json:"write_errors"` // failed Write or Flush calls of the store
}

// Pipeline is the record side's way to the store: Sample once per request,
// Submit finished sessions; a background writer masks, caps and writes them
// in batches. Submit never blocks: when the queue is full the session is
// dropped and counted.
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

	recorded, dropped, masked, truncated, writeErrors atomic.Int64
}

// NewPipeline starts a pipeline and its writer goroutine; Close ends it.
func NewPipeline(cfg PipelineConfig) (*Pipeline, error) {
	if cfg.Store == nil {
		return nil, errors.New("recording: pipeline needs a store")
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
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
	go (&pipelineWriter{p: p}).run()
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
		p.dropped.Add(1)
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
		p.dropped.Add(1)
		return false
	}
}

// MaxPayload returns the payload cap (negative: none), so that capture can
// stop buffering bytes it would drop anyway.
func (p *Pipeline) MaxPayload() int { return p.cfg.MaxPayload }

// Stats returns the counters.
func (p *Pipeline) Stats() Stats {
	return Stats{Seen: p.seen.Load(), Sampled: p.sampled.Load(), Recorded: p.recorded.Load(),
		Dropped: p.dropped.Load(), Masked: p.masked.Load(), Truncated: p.truncated.Load(),
		WriteErrors: p.writeErrors.Load()}
}

// Flush writes every queued session and flushes the store.
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

// Close stops accepting sessions, writes what is queued, flushes and closes
// the store. When ctx ends first, what is still queued is dropped and
// counted, and Close returns without closing the store (a Write may still
// be in progress; the writer ends when it returns). Safe to call twice.
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
	})
	return p.closeErr
}

// pipelineWriter is the goroutine that writes sessions to the store.
type pipelineWriter struct {
	p     *Pipeline
	batch []*Session
	dirty bool // written since the last flush
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
		case reply := <-p.flushes:
			w.drain()
			reply <- w.flush()
		case <-p.stop:
			w.drain()
			_ = w.flush()
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
		select {
		case <-w.p.abandon:
			for {
				select {
				case <-w.p.queue:
					w.p.dropped.Add(1)
				default:
					return
				}
			}
		default:
		}
		select {
		case s := <-w.p.queue:
			w.collect(s)
		default:
			return
		}
	}
}

func (w *pipelineWriter) write() {
	p := w.p
	select {
	case <-p.abandon: // Close gave up waiting: drop, don't write
		p.dropped.Add(int64(len(w.batch)))
		clear(w.batch)
		w.batch = w.batch[:0]
		return
	default:
	}
	for _, s := range w.batch {
		if p.cfg.Mask != nil && p.cfg.Mask.MaskSession(s) {
			p.masked.Add(1)
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
	if err := p.cfg.Store.Write(context.Background(), w.batch); err != nil {
		p.writeErrors.Add(1)
		p.dropped.Add(int64(len(w.batch)))
		p.cfg.ErrorLog(err)
	} else {
		p.recorded.Add(int64(len(w.batch)))
		w.dirty = true
	}
	clear(w.batch)
	w.batch = w.batch[:0]
}

func (w *pipelineWriter) flush() error {
	w.dirty = false
	if err := w.p.cfg.Store.Flush(context.Background()); err != nil {
		w.p.writeErrors.Add(1)
		w.p.cfg.ErrorLog(err)
		return err
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
