package recording

import (
	"bytes"
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
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			if errors.Is(err, io.EOF) { // empty file: a writer that has not flushed yet
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
			if errors.Is(err, io.ErrUnexpectedEOF) {
				// a gzip file whose writer has not closed it yet (or that a
				// crash cut short): what was flushed has been read and the
				// rest is not there to read. Not worth a report.
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
		if err := fn(s); err != nil {
			return err
		}
	}
}
