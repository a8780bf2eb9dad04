package patches

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/retrace-dev/retrace/recording/capture"
)

// EnvFlushSignals names the signals (TERM, INT, HUP, QUIT, comma-separated)
// that the application does NOT handle itself, so that the agent may catch
// them: on one it writes what the recorder holds (bounded by
// DefaultStopTimeout), then ends the process by the same signal, as it
// would have ended without the agent. Unset: the agent installs no signal
// handler. See docs/recording.md, "Stopping without losing sessions".
const EnvFlushSignals = "RETRACE_FLUSH_SIGNALS"

// DefaultStopTimeout bounds the flush the agent does on a signal of
// RETRACE_FLUSH_SIGNALS.
const DefaultStopTimeout = 10 * time.Second

var signalNames = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT,
}

func parseSignals(v string) ([]os.Signal, error) {
	var out []os.Signal
	for _, name := range strings.Split(v, ",") {
		name = strings.ToUpper(strings.TrimPrefix(strings.TrimSpace(name), "SIG"))
		if name == "" {
			continue
		}
		sig, ok := signalNames[strings.TrimPrefix(name, "SIG")]
		if !ok {
			return nil, fmt.Errorf("signal %q is not one of TERM, INT, HUP, QUIT", name)
		}
		out = append(out, sig)
	}
	return out, nil
}

// flushOnSignals catches sigs; on the first it calls stop, then stops
// catching and sends the signal again, so the process ends as the signal's
// default action ends it (the exit status says "killed by SIGTERM").
func flushOnSignals(sigs []os.Signal, stop func(context.Context) error) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go (&signalFlusher{ch: ch, stop: stop}).run()
}

// signalFlusher is the goroutine that waits for a signal of
// RETRACE_FLUSH_SIGNALS. It lives as long as the process.
type signalFlusher struct {
	ch   chan os.Signal
	stop func(context.Context) error
}

func (f *signalFlusher) run() {
	sig := <-f.ch
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStopTimeout)
	if err := f.stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "retrace: flushing recordings on %v: %v\n", sig, err)
	}
	cancel()
	signal.Stop(f.ch) // the application has no handler of its own: the default action again
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(os.Getpid(), s)
	}
}

// Stats returns the counters of the recorder the agent started from the
// environment (sessions recorded, dropped and why, bytes buffered, store
// errors, masking), and false when there is none (the mode is not record,
// or the agent is off).
func Stats() (capture.Stats, bool) {
	started.Lock()
	rec := started.rec
	started.Unlock()
	if rec == nil {
		return capture.Stats{}, false
	}
	return rec.Stats(), true
}
