package patches

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording/capture"
)

// Environment variables read at init (DESIGN.md 3.1). The record-mode ones
// (RETRACE_APP, RETRACE_RECORD, RETRACE_SAMPLE, RETRACE_MASK) are read by
// the recorder, see RecorderFactory.
const (
	EnvMode        = "RETRACE_MODE"
	EnvMockAddr    = "RETRACE_MOCK_ADDR"
	EnvPassthrough = "RETRACE_PASSTHROUGH"
	EnvLog         = "RETRACE_LOG"
	EnvRandom      = "RETRACE_RANDOM"
)

// FromEnv builds a hook.Config from the environment (getenv is os.Getenv
// in the agent). Its Recorder is nil: in record mode the caller asks the
// RecorderFactory for one. Errors name the variable and the bad value.
func FromEnv(getenv func(string) string) (hook.Config, error) {
	var cfg hook.Config
	var err error
	if cfg.Mode, err = hook.ParseMode(getenv(EnvMode)); err != nil {
		return hook.Config{}, fmt.Errorf("%s: %w", EnvMode, err)
	}
	level, err := parseLevel(getenv(EnvLog))
	if err != nil {
		return hook.Config{}, fmt.Errorf("%s: %w", EnvLog, err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.Random, err = hook.ParseRandom(getenv(EnvRandom)); err != nil {
		return hook.Config{}, fmt.Errorf("%s: %w", EnvRandom, err)
	}
	if v := strings.TrimSpace(getenv(EnvMockAddr)); v != "" {
		if err := checkHostPort(v); err != nil {
			return hook.Config{}, fmt.Errorf("%s: %w", EnvMockAddr, err)
		}
		cfg.MockAddr = v
	}
	for _, p := range strings.Split(getenv(EnvPassthrough), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := checkHostPort(p); err != nil {
			return hook.Config{}, fmt.Errorf("%s: %w", EnvPassthrough, err)
		}
		cfg.Passthrough = append(cfg.Passthrough, p)
	}
	return cfg, nil
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "error":
		return slog.LevelError, nil
	case "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	}
	return 0, fmt.Errorf("log level %q is not one of error, info, debug", s)
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", s, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("%q is not host:port: empty host or port", s)
	}
	return nil
}

// Start installs the hooks for cfg (see hook.Install) and returns the
// function that removes them again; stop is safe to call more than once.
// With cfg.Mode Off it installs nothing.
func Start(cfg hook.Config) (stop func(ctx context.Context) error, err error) {
	undo, err := hook.Install(cfg)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { undo(); return nil }, nil
}

var started struct {
	sync.Mutex
	stop func(context.Context) error
	err  error
	rec  interface{ Stats() capture.Stats } // the recorder of record mode, or nil
}

// Stop removes what init installed from the environment, after letting a
// recorder write every session it holds (bounded by ctx). It is the
// shutdown hook of a service that handles SIGTERM itself: call it once the
// server has shut down (http.Server.Shutdown returned), before main
// returns, so no completed session is lost (examples/orders does). Without
// an agent started by init it does nothing; safe to call twice.
func Stop(ctx context.Context) error {
	started.Lock()
	stop := started.stop
	started.stop = nil
	started.Unlock()
	if stop == nil {
		return nil
	}
	return stop(ctx)
}

// Err returns why init left the agent off, or nil (also when the mode is
// off).
func Err() error {
	started.Lock()
	defer started.Unlock()
	return started.err
}

func init() {
	stop, err := startFromEnv(os.Getenv)
	if err == nil && stop != nil {
		var sigs []os.Signal
		if sigs, err = parseSignals(os.Getenv(EnvFlushSignals)); err != nil {
			_ = stop(context.Background())
			stop, err = nil, fmt.Errorf("%s: %w", EnvFlushSignals, err)
			started.rec = nil
		} else if len(sigs) > 0 {
			flushOnSignals(sigs, Stop)
		}
	}
	started.Lock()
	started.stop, started.err = stop, err
	started.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "retrace: agent off: %v\n", err)
	}
}

// startFromEnv is init's work: read the environment and start the agent.
func startFromEnv(getenv func(string) string) (stop func(context.Context) error, err error) {
	defer func() {
		if r := recover(); r != nil {
			stop, err = nil, fmt.Errorf("agent failed to start: %v", r)
		}
	}()
	cfg, err := FromEnv(getenv)
	if err != nil || cfg.Mode == hook.Off {
		return nil, err
	}
	var stopRecorder func(context.Context) error
	if cfg.Mode == hook.Record {
		if recorderFactory == nil {
			return nil, errors.New("record mode is not available in this build: no recorder is registered (patches/record.go)")
		}
		rec, stopRec, err := recorderFactory(getenv, cfg.Logger)
		if err != nil {
			return nil, err
		}
		cfg.Recorder, stopRecorder = rec, stopRec
		if r, ok := rec.(interface{ Stats() capture.Stats }); ok {
			started.Lock()
			started.rec = r
			started.Unlock()
		}
	}
	stopHooks, err := Start(cfg)
	if err != nil {
		if stopRecorder != nil {
			_ = stopRecorder(context.Background())
		}
		started.Lock()
		started.rec = nil
		started.Unlock()
		return nil, err
	}
	return func(ctx context.Context) error {
		err := stopHooks(ctx)
		if stopRecorder != nil {
			err = errors.Join(err, stopRecorder(ctx))
		}
		return err
	}, nil
}
