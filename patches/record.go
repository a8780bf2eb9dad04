package patches

import (
	"context"
	"log/slog"

	"github.com/retrace-dev/retrace/hook"
)

// RecorderFactory builds the recorder of record mode from the environment
// (RETRACE_APP, RETRACE_RECORD, RETRACE_SAMPLE, RETRACE_MASK; getenv is
// os.Getenv) and returns it with the function that flushes and closes it,
// bounded by ctx. A bad value is an error naming the variable; the agent
// then stays off.
type RecorderFactory func(getenv func(string) string, logger *slog.Logger) (rec hook.Recorder, stop func(ctx context.Context) error, err error)

// recorderFactory is the record-mode integration point. This file belongs
// to the recording package's owners: they set it with a package-level
// variable initializer (which runs before any init function, whatever the
// file order), e.g.
//
//	var recorderFactory RecorderFactory = capture.FromEnv
//
// While it is nil, RETRACE_MODE=record reports that record mode is not
// available and leaves the agent off.
var recorderFactory RecorderFactory
