package recording

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/retrace-dev/retrace/internal/lines"
)

// ReadJSONL decodes every line of r (gzip when name ends in .gz) and calls
// fn; lines that do not decode are reported to o.OnError and counted in
// skipped. Stores of other packages read their objects with it. An error of fn is
// returned as is; a read error is returned wrapped with the source name.
func ReadJSONL(ctx context.Context, name string, r io.Reader, o *Settings, skipped *SkipCounter, fn func(*Session) error) error {
	gz := strings.HasSuffix(name, ".gz")
	read := 0 // sessions handed to fn
	if gz {
		zr, err := gzip.NewReader(r)
		if err != nil {
			if errors.Is(err, io.EOF) { // empty file: a writer that has not flushed yet
				return nil
			}
			if damagedGzip(err) {
				skipped.Skip()
				o.OnError(&DamagedError{Source: name, Err: err})
				return nil
			}
			return fmt.Errorf("recording: %s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	}
	lr := lines.NewReader(r, 64<<10, o.MaxLine)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if gz && damagedGzip(err) {
				// the file is cut short (a crash, a copy that did not
				// finish) or its compressed data is bad: what came before
				// was read, the rest is lost; the writer only ever appends
				// whole members, so this is not a file being written
				skipped.Skip()
				o.OnError(&DamagedError{Source: name, Sessions: read, Line: lr.Line(), Err: err})
				return nil
			}
			return fmt.Errorf("recording: %s: after line %d: %w", name, lr.Line(), err)
		}
		if tooLong {
			skipped.Skip()
			o.OnError(&BadLineError{Source: name, Line: lr.Line(), Err: fmt.Errorf("line longer than %d bytes", o.MaxLine)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		s, err := Unmarshal(line)
		if err != nil {
			skipped.Skip()
			o.OnError(&BadLineError{Source: name, Line: lr.Line(), Err: err})
			continue
		}
		read++
		if err := fn(s); err != nil {
			return err
		}
	}
}

// damagedGzip reports whether err is gzip or deflate data that is cut short
// or corrupt (rather than an error of the reader under it).
func damagedGzip(err error) bool {
	var corrupt flate.CorruptInputError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) ||
		errors.Is(err, gzip.ErrHeader) || errors.As(err, &corrupt)
}

// DamagedError reports a compressed file whose data ends early or is
// corrupt: the sessions before the damage were read, the rest is lost.
type DamagedError struct {
	Source   string // file or object name
	Sessions int    // sessions read from it before the damage
	Line     int    // lines read before the damage
	Err      error
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("recording: %s: truncated or corrupt gzip data after %d sessions (%d lines): %v; the rest of the file is lost",
		e.Source, e.Sessions, e.Line, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }
