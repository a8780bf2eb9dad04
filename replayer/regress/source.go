package regress

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/retrace-dev/retrace/recording"
)

// Source streams recorded sessions. Scan calls fn for every session in a
// stable order and stops at the first error fn returns; it may be called
// more than once (noise detection reads the sessions before the run).
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
	_ Source = (*Files)(nil)
)

// Files is a Source reading schema-v1 JSONL: one file, or every *.jsonl
// and *.jsonl.gz file of a directory (recursively, in name order). A line
// that does not decode is passed to BadLine (with its file and line number)
// and skipped.
type Files struct {
	Path    string
	BadLine func(error) // nil: bad lines are skipped silently
}

// OpenFiles checks that path (a file, a directory or a file:// URL) exists
// and returns a Source over its recordings.
func OpenFiles(path string, badLine func(error)) (*Files, error) {
	path = strings.TrimPrefix(path, "file://")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("recordings %q: %w", path, err)
	}
	return &Files{Path: path, BadLine: badLine}, nil
}

// Scan reads every file in order.
func (f *Files) Scan(ctx context.Context, fn func(*recording.Session) error) error {
	st, err := os.Stat(f.Path)
	if err != nil {
		return fmt.Errorf("recordings %q: %w", f.Path, err)
	}
	files := []string{f.Path}
	if st.IsDir() {
		files = files[:0]
		err := filepath.WalkDir(f.Path, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(p, ".jsonl") || strings.HasSuffix(p, ".jsonl.gz")) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("recordings %q: %w", f.Path, err)
		}
		sort.Strings(files)
	}
	for _, name := range files {
		if err := f.scanFile(ctx, name, fn); err != nil {
			return err
		}
	}
	return nil
}

func (f *Files) scanFile(ctx context.Context, name string, fn func(*recording.Session) error) error {
	fh, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("recordings: %w", err)
	}
	defer fh.Close()
	var r io.Reader = fh
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(fh)
		if err != nil {
			return fmt.Errorf("recordings %s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	}
	br := bufio.NewReaderSize(r, 256<<10)
	for line := 1; ; line++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := br.ReadBytes('\n')
		if len(strings.TrimSpace(string(b))) > 0 {
			s, perr := recording.Unmarshal(b)
			if perr != nil {
				if f.BadLine != nil {
					f.BadLine(fmt.Errorf("%s:%d: %w", name, line, perr))
				}
			} else if ferr := fn(s); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("recordings %s:%d: %w", name, line, err)
		}
	}
}
