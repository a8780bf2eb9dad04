package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording/capture"
)

// ChildEnv, set to "1" in a process's environment, makes `retrace demo` run
// the orders service instead of the demo (ServeChild). The demo starts its
// own binary this way, so that no toolchain is needed at run time and the
// agent patches only the child.
const ChildEnv = "RETRACE_DEMO_SERVICE"

// Environment of the child besides the ORDERS_* variables of
// orders.ConfigFromEnv and RETRACE_MODE, RETRACE_MOCK_ADDR and the record
// variables of package capture.
const (
	childListenEnv = "ORDERS_LISTEN"
	modeEnv        = "RETRACE_MODE"
	mockAddrEnv    = "RETRACE_MOCK_ADDR"
)

// ServeChild runs the orders service until ctx ends, with the agent
// installed through the hook API for the RETRACE_MODE of getenv (the
// example's own main uses the blank import instead). In record mode the
// recorder is flushed before ServeChild returns.
func ServeChild(ctx context.Context, getenv func(string) string, log io.Writer) (err error) {
	mode, err := hook.ParseMode(getenv(modeEnv))
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg := hook.Config{Mode: mode, MockAddr: getenv(mockAddrEnv), Logger: logger}
	if mode == hook.Record {
		rec, stop, err := capture.FromEnv(getenv, logger)
		if err != nil {
			return fmt.Errorf("record mode: %w", err)
		}
		defer func() {
			if serr := stop(context.Background()); serr != nil && err == nil {
				err = fmt.Errorf("flushing recordings: %w", serr)
			}
		}()
		cfg.Recorder = rec
	}
	if mode != hook.Off {
		undo, err := hook.Install(cfg)
		if err != nil {
			return fmt.Errorf("installing the agent (%s mode): %w", mode, err)
		}
		defer undo()
	}
	srv, err := orders.NewServer(orders.ConfigFromEnv())
	if err != nil {
		return err
	}
	defer srv.Close()
	return srv.ListenAndServe(ctx, getenv(childListenEnv), log)
}
