// Package ratelog is a slog.Handler that limits repeated log lines: a
// message logged over and over (a missing mock per request, a refused
// connection per dial) is written a few times per window, and how many
// were held back is written once the window is over. Distinct messages are
// limited separately, so a flood of one never hides another.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config's zero fields.
const (
	DefaultWindow = 10 * time.Second
	DefaultBurst  = 10
)

// maxKeys bounds the messages tracked at once: past it, a window's unseen
// messages pass unlimited until the window ends (a program has a handful
// of distinct messages; this only bounds a pathological caller).
const maxKeys = 1024

// Config configures a Handler.
type Config struct {
	// Window is the period over which each message is limited. 0 means
	// DefaultWindow.
	Window time.Duration
	// Burst is how many records of one message (same level and text) pass
	// per window. 0 means DefaultBurst.
	Burst int
	// OnSuppress, when set, is called with the number of records held back
	// each time some are (for a counter).
	OnSuppress func(n int)
}

// Handler wraps another slog.Handler and limits repeated messages.
type Handler struct {
	next slog.Handler
	st   *state
}

// state is shared by a Handler and those derived by WithAttrs/WithGroup:
// the limit is per message, whatever attributes a logger added.
type state struct {
	cfg Config
	now func() time.Time

	mu     sync.Mutex
	start  time.Time
	counts map[key]*count

	suppressed atomic.Int64
}

type key struct {
	level slog.Level
	msg   string
}

type count struct {
	n    int
	held int
	next slog.Handler // the handler the first held record would have gone to
}

var _ slog.Handler = (*Handler)(nil)

// New returns a Handler that passes records to next within cfg's limits.
func New(next slog.Handler, cfg Config) *Handler {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	return &Handler{next: next, st: &state{cfg: cfg, now: time.Now, counts: map[key]*count{}}}
}

// Suppressed returns how many records were held back so far.
func (h *Handler) Suppressed() int64 { return h.st.suppressed.Load() }

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes r on unless its message is over the limit of the window.
// When a window ends, every message that was held back in it gets one
// record saying how many.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	st := h.st
	st.mu.Lock()
	now := st.now()
	var flush []flushed
	if st.start.IsZero() || now.Sub(st.start) >= st.cfg.Window {
		flush = st.rollLocked(now)
	}
	k := key{r.Level, r.Message}
	c := st.counts[k]
	if c == nil && len(st.counts) < maxKeys {
		c = &count{}
		st.counts[k] = c
	}
	pass := true
	if c != nil {
		c.n++
		if c.n > st.cfg.Burst {
			pass = false
			if c.held == 0 {
				c.next = h.next
			}
			c.held++
		}
	}
	st.mu.Unlock()
	for _, f := range flush {
		f.write(ctx, now, st.cfg.Window)
	}
	if !pass {
		st.suppressed.Add(1)
		if st.cfg.OnSuppress != nil {
			st.cfg.OnSuppress(1)
		}
		return nil
	}
	return h.next.Handle(ctx, r)
}

// Flush writes the counts of records held back in the current window now,
// and starts a new window (call it before the program ends).
func (h *Handler) Flush(ctx context.Context) {
	st := h.st
	st.mu.Lock()
	now := st.now()
	flush := st.rollLocked(now)
	st.mu.Unlock()
	for _, f := range flush {
		f.write(ctx, now, st.cfg.Window)
	}
}

type flushed struct {
	key
	held int
	next slog.Handler
}

func (f flushed) write(ctx context.Context, now time.Time, window time.Duration) {
	r := slog.NewRecord(now, f.level, "repeated log line suppressed", 0)
	r.AddAttrs(slog.String("message", f.msg), slog.Int("count", f.held), slog.Duration("window", window))
	f.next.Handle(ctx, r)
}

// rollLocked ends the window; the caller holds st.mu.
func (st *state) rollLocked(now time.Time) []flushed {
	var out []flushed
	for k, c := range st.counts {
		if c.held > 0 {
			out = append(out, flushed{k, c.held, c.next})
		}
	}
	clear(st.counts)
	st.start = now
	return out
}

// WithAttrs returns a Handler adding attrs, limited together with h.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), st: h.st}
}

// WithGroup returns a Handler opening a group, limited together with h.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), st: h.st}
}
