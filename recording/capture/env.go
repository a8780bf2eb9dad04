package capture

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
)

// Environment variables of record mode (DESIGN.md 3.1).
const (
	EnvApp    = "RETRACE_APP"    // service name stored in sessions; default: the executable's name
	EnvRecord = "RETRACE_RECORD" // store URL (recording.Open); default DefaultRecord
	EnvSample = "RETRACE_SAMPLE" // fraction recorded, 0..1 or N%; default 1
	EnvMask   = "RETRACE_MASK"   // masking-rules file (recording.Masker); default none
	EnvBuffer = "RETRACE_BUFFER" // bytes of sessions kept while the store is slow or down; default 32MiB
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
		if err := ds.MkdirAll(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", EnvRecord, err)
		}
	}
	buffer := int64(recording.DefaultBufferBytes)
	if v := getenv(EnvBuffer); v != "" {
		if buffer, err = ParseBytes(v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", EnvBuffer, err)
		}
	}
	pipe, err := recording.NewPipeline(recording.PipelineConfig{
		Store: store, Sampler: sampler, Mask: mask, Decode: Decode, BufferBytes: buffer,
		// drops and store failures at level error, the agent's default:
		// the first at once, then a count every ReportInterval
		Logger: logger.With("store", dest),
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

// ParseBytes reads a size: a number of bytes, optionally with a unit (KB,
// MB, GB: powers of 1000; KiB, MiB, GiB: of 1024; B). It must be positive.
func ParseBytes(v string) (int64, error) {
	s := strings.TrimSpace(v)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	mult := map[string]int64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || mult == 0 || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size in bytes (like 33554432, 64MB or 32MiB)", v)
	}
	return n * mult, nil
}
