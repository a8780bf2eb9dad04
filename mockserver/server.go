package mockserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/internal/ratelog"
	"github.com/retrace-dev/retrace/recording"
)

// Server is a mock server: it answers framed downstream traffic of replayed
// requests (DESIGN.md 3.3) from recorded sessions, and serves the admin API.
type Server struct {
	cfg      Config
	log      *slog.Logger
	logLimit *ratelog.Handler // nil when LogWindow < 0
	idx      *index
	traces   *traceTable
	metrics  *metrics
	dests    *dests

	ctx    context.Context
	cancel context.CancelFunc

	// epoch is the origin of the server's clock: connections read the time
	// as the monotonic time since (cheaper than time.Now, which also reads
	// the wall clock). It lies just before New, so a reading is never 0.
	epoch time.Time

	mu      sync.Mutex
	ln      net.Listener
	adminLn net.Listener
	admin   *http.Server
	conns   map[net.Conn]struct{}
	started bool
	closed  bool
	wg      sync.WaitGroup
}

// New returns a server configured by cfg, with no recordings loaded and not
// yet listening.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, idx: newIndex(), conns: map[net.Conn]struct{}{}}
	s.metrics = newMetrics(gauges{
		sessions: func() float64 { return float64(s.idx.count()) },
		traces:   func() float64 { n, _ := s.traces.sizes(); return float64(n) },
		aliases:  func() float64 { _, n := s.traces.sizes(); return float64(n) },
	})
	s.log = cfg.Logger
	if cfg.LogWindow > 0 {
		s.logLimit = ratelog.New(cfg.Logger.Handler(), ratelog.Config{Window: cfg.LogWindow, Burst: cfg.LogBurst,
			OnSuppress: func(n int) { s.metrics.logSuppressed.Add(float64(n)) }})
		s.log = slog.New(s.logLimit)
	}
	s.traces = newTraceTable(&cfg, func(reason string, n int) {
		s.metrics.dropped.WithLabelValues(reason).Add(float64(n))
		if reason == "lru" {
			s.log.Warn("trace table full: dropped the least recently used traces (raise MaxTraces / --max-traces, or DELETE finished traces)",
				"dropped", n, "max_traces", cfg.MaxTraces)
		}
	})
	s.dests = newDests(cfg.Map, func(d DestDecision) {
		if d.How == HowExact {
			return
		}
		s.log.Info("destination", "live", d.Live, "recorded", d.Recorded, "how", d.How, "proto", d.Proto, "reason", d.Reason, "tentative", d.Tentative)
	})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.epoch = time.Now().Add(-time.Nanosecond)
	return s, nil
}

// Load adds every session src yields and returns how many it added. Sessions
// can be loaded before or after Start; a session with the id of a loaded one
// replaces it.
func (s *Server) Load(ctx context.Context, src Source) (int, error) {
	n := 0
	err := src(ctx, func(sess *recording.Session) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.AddSession(sess)
		n++
		return nil
	})
	return n, err
}

// AddSession adds one recorded session. The server keeps sess and refers to
// its payloads: the caller must not change it afterwards.
func (s *Server) AddSession(sess *recording.Session) {
	s.idx.add(sess)
}

// Destinations returns which recorded destination answers each live
// destination seen so far, and why (DESIGN.md section 10).
func (s *Server) Destinations() []DestDecision { return s.dests.list() }

// now reads the server's clock: the time since epoch, always positive.
func (s *Server) now() time.Duration { return time.Since(s.epoch) }

// Start binds the listeners and serves in background goroutines until
// Close.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return errors.New("mockserver: Start called twice or after Close")
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("mockserver: listen on %s: %w", s.cfg.Listen, err)
	}
	if s.cfg.Admin != "-" {
		aln, err := net.Listen("tcp", s.cfg.Admin)
		if err != nil {
			ln.Close()
			return fmt.Errorf("mockserver: admin listen on %s: %w", s.cfg.Admin, err)
		}
		s.adminLn = aln
		s.admin = &http.Server{Handler: s.adminHandler(true), ReadHeaderTimeout: min(10*time.Second, s.cfg.AdminReadTimeout),
			ReadTimeout: s.cfg.AdminReadTimeout, WriteTimeout: s.cfg.AdminWriteTimeout, IdleTimeout: 2 * time.Minute,
			MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.admin.Serve(aln)
		}()
	}
	s.ln = ln
	s.started = true
	s.wg.Add(2)
	go s.acceptLoop(ln)
	go s.janitor()
	s.log.Info("mock server listening", "addr", ln.Addr().String(), "admin", s.AdminURL(), "sessions", s.idx.count())
	return nil
}

// Traces returns how many traces the server holds state for: those that
// named a recording or an alias, not deleted through DELETE
// /traces/{trace} and not expired.
func (s *Server) Traces() int {
	n, _ := s.traces.sizes()
	return n
}

// Aliases returns how many aliases are registered.
func (s *Server) Aliases() int {
	_, n := s.traces.sizes()
	return n
}

// janitor is the goroutine that advances the trace table's clock, expires
// idle traces and aliases, and writes the counts of held-back log lines.
func (s *Server) janitor() {
	defer s.wg.Done()
	every := time.Second
	if ttl := s.cfg.TraceTTL; ttl > 0 {
		every = min(every, max(ttl/8, time.Millisecond))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	lastFlush := s.now()
	for {
		select {
		case <-s.ctx.Done():
			if s.logLimit != nil {
				s.logLimit.Flush(context.Background())
			}
			return
		case <-t.C:
		}
		now := s.now()
		s.traces.expire(int64(now))
		if s.logLimit != nil && now-lastFlush >= s.cfg.LogWindow {
			s.logLimit.Flush(context.Background())
			lastFlush = now
		}
	}
}

// Addr returns the address of the framed-traffic listener ("" before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// AdminURL returns the base URL of the admin API ("" before Start or when
// disabled), such as http://127.0.0.1:3516.
func (s *Server) AdminURL() string {
	if s.adminLn == nil {
		return ""
	}
	return "http://" + s.adminLn.Addr().String()
}

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (EMFILE): back off, keep serving.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		if s.cfg.MaxConns > 0 && len(s.conns) >= s.cfg.MaxConns {
			s.mu.Unlock()
			nc.Close()
			s.metrics.connsRefused.Inc()
			s.log.Warn("connection refused: too many open (raise MaxConns / --max-conns)", "remote", nc.RemoteAddr().String(), "max_conns", s.cfg.MaxConns)
			continue
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.metrics.open.Inc()
		s.metrics.conns.Inc()
		go s.serveConn(nc)
	}
}

// serveConn is the goroutine of one framed connection.
func (s *Server) serveConn(nc net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		s.metrics.open.Dec()
		s.wg.Done()
	}()
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, 32<<10), ctx: s.ctx}
	c.serve()
}

// Close stops the listeners, closes every connection and waits until all
// of the server's goroutines have returned. It is safe to call twice.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	var errs []error
	if s.ln != nil {
		errs = append(errs, s.ln.Close())
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Close())
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return errors.Join(errs...)
}
