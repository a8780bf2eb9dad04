package patches

import (
	"context"
	"log/slog"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording/capture"
)

// RecorderFactory builds the recorder of record mode from the environment
// (RETRACE_APP, RETRACE_RECORD, RETRACE_SAMPLE, RETRACE_MASK; getenv is
// os.Getenv) and returns it with the function that flushes and closes it,
// bounded by ctx. A bad value is an error naming the variable; the agent
// then stays off.
type RecorderFactory func(getenv func(string) string, logger *slog.Logger) (rec hook.Recorder, stop func(ctx context.Context) error, err error)

// recorderFactory is the record-mode integration point: sessions are
// assembled by recording/capture and written through a recording.Pipeline
// to the store RETRACE_RECORD names. Object-storage URLs (s3://, gs://,
// azblob://) need the drivers of recording/cloud linked in: a service that
// records to a bucket adds
//
//	import _ "github.com/retrace-dev/retrace/recording/cloud"
//
// (left out here so that every service does not link three cloud SDKs).
var recorderFactory RecorderFactory = capture.FromEnv
