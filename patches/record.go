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
// to the store RETRACE_RECORD names. The agent links the directory store
// only; a service that records elsewhere adds the store's import beside
// the agent's:
//
//	import _ "github.com/retrace-dev/retrace/recording/redisstore" // redis://, rediss://
//	import _ "github.com/retrace-dev/retrace/recording/cloud"      // s3://, gs://, azblob://
//
// Without it such a RETRACE_RECORD is an error naming the import, and the
// agent stays off (TestAgentLinksNoStoreSDK holds the footprint).
var recorderFactory RecorderFactory = capture.FromEnv
