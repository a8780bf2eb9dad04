package capture

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
)

// Environment variables of record mode (DESIGN.md 3.1).
const (
	EnvApp    = "RETRACE_APP"    // service name stored in sessions; default: the executable's name
	EnvRecord = "RETRACE_RECORD" // store URL (recording.Open); default DefaultRecord
	EnvSample = "RETRACE_SAMPLE" // fraction recorded, 0..1 or N%; default 1
	EnvMask   = "RETRACE_MASK"   // masking-rules file (recording.Masker); default none
)

// DefaultRecord is where record mode writes when RETRACE_RECORD is unset.
const DefaultRecord = "./retrace-recordings"

// FromEnv builds the record-mode Recorder from the environment (getenv is
// os.Getenv in the agent) and returns it with the function that flushes
// and closes it. It has the signature of patches.RecorderFactory. Errors
// name the variable and its value; the store is checked (a directory is
// created) before FromEnv returns, so a bad destination keeps the agent off
// instead of losing every session later.
func FromEnv(getenv func(string) string, logger *slog.Logger) (hook.Recorder, func(context.Context) error, error) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	app := getenv(EnvApp)
	if app == "" {
		app = filepath.Base(os.Args[0])
	}
	dest := getenv(EnvRecord)
	if dest == "" {
		dest = DefaultRecord
	}
	sampler, err := recording.NewSampler(1)
	if v := getenv(EnvSample); v != "" {
		sampler, err = recording.ParseSampler(v)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", EnvSample, err)
	}
	var mask *recording.Masker
	if v := getenv(EnvMask); v != "" {
		if mask, err = recording.LoadMasker(v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", EnvMask, err)
		}
	}
	store, err := recording.Open(context.Background(), dest, recording.WithErrorHandler(func(err error) {
		logger.Error("retrace: recording store", "err", err)
	}))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", EnvRecord, err)
	}
	if ds, ok := store.(*recording.DirStore); ok {
		if err := os.MkdirAll(ds.Dir(), 0o755); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", EnvRecord, err)
		}
	}
	var writeErrs atomic.Int64
	pipe, err := recording.NewPipeline(recording.PipelineConfig{
		Store: store, Sampler: sampler, Mask: mask, Decode: Decode,
		ErrorLog: func(err error) {
			// the first write error, then one in a thousand
			if n := writeErrs.Add(1); n == 1 || n%1000 == 0 {
				logger.Error("retrace: writing sessions failed", "store", dest, "errors", n, "err", err)
			}
		},
	})
	if err != nil {
		return nil, nil, err
	}
	rec, err := New(Config{Pipeline: pipe, App: app, Logger: logger})
	if err != nil {
		_ = pipe.Close(context.Background())
		return nil, nil, err
	}
	logger.Info("retrace: recording", "app", app, "store", dest, "sample", getenv(EnvSample), "mask", getenv(EnvMask))
	return rec, rec.Close, nil
}
