package regress

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/retrace-dev/retrace/recording"
)

// Source streams recorded sessions. Scan calls fn for every session in a
// stable order and stops at the first error fn returns; it may be called
// more than once (noise detection reads the sessions before the run). Every
// recording.Store is a Source.
type Source interface {
	Scan(ctx context.Context, fn func(*recording.Session) error) error
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, fn func(*recording.Session) error) error

// Scan calls f.
func (f SourceFunc) Scan(ctx context.Context, fn func(*recording.Session) error) error {
	return f(ctx, fn)
}

// Sessions is a Source over sessions in memory (tests, small tools).
type Sessions []*recording.Session

// Scan calls fn for each session in order.
func (s Sessions) Scan(ctx context.Context, fn func(*recording.Session) error) error {
	for _, x := range s {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(x); err != nil {
			return err
		}
	}
	return nil
}

var (
	_ Source = Sessions(nil)
	_ Source = SourceFunc(nil)
	_ Source = recording.Store(nil)
)

// OpenSource opens the recording store named by url (a directory, file://,
// redis:// or an object-storage URL; see recording.Open). A local directory
// must exist. Lines that do not decode are passed to badLine (with their
// file and line number) and skipped. The caller closes the store.
func OpenSource(ctx context.Context, url string, badLine func(error)) (recording.Store, error) {
	if dir, local := localDir(url); local {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("recordings %q: %w", url, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("recordings %q: not a directory (want a directory of session JSONL files or a store URL)", url)
		}
	}
	var opts []recording.Option
	if badLine != nil {
		opts = append(opts, recording.WithErrorHandler(badLine))
	}
	s, err := recording.Open(ctx, url, opts...)
	if err != nil {
		return nil, fmt.Errorf("recordings %q: %w", url, err)
	}
	return s, nil
}

func localDir(url string) (string, bool) {
	if rest, ok := strings.CutPrefix(url, "file://"); ok {
		return rest, true
	}
	return url, !strings.Contains(url, "://")
}
