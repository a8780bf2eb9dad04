package recording

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// lineReader yields the lines of a JSONL stream one at a time, with a cap on
// the length of a line, so that memory stays bounded however large the file
// (bufio.Scanner would fail at 64 KiB; an unbounded ReadBytes would let one
// corrupt line without newlines eat the heap).
type lineReader struct {
	r       *bufio.Reader
	max     int
	buf     []byte
	line    int
	tooLong bool // the last line returned was cut at max
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its newline; the slice is valid until
// the following call. At the end it returns io.EOF.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	l.tooLong = false
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(l.buf)+len(chunk) > l.max {
			l.tooLong = true
			keep := l.max - len(l.buf)
			if keep > 0 {
				l.buf = append(l.buf, chunk[:keep]...)
			}
		} else {
			l.buf = append(l.buf, chunk...)
		}
		switch {
		case err == nil:
			l.line++
			return bytes.TrimRight(l.buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(l.buf) == 0 && !l.tooLong {
				return nil, io.EOF
			}
			l.line++
			return bytes.TrimRight(l.buf, "\r\n"), nil
		default:
			return nil, err
		}
	}
}

// scanStream decodes every line of r (gzip when name ends in .gz) and calls
// fn; lines that do not decode are reported and counted. An error of fn is
// returned as is; a read error is returned wrapped with the source name.
func scanStream(ctx context.Context, name string, r io.Reader, o *options, skipped *skipCounter, fn func(*Session) error) error {
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
	lr := newLineReader(r, o.maxLine)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, err := lr.next()
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
			return fmt.Errorf("recording: %s: after line %d: %w", name, lr.line, err)
		}
		if lr.tooLong {
			skipped.n.Add(1)
			o.onError(&BadLineError{Source: name, Line: lr.line, Err: fmt.Errorf("line longer than %d bytes", o.maxLine)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		s, err := Unmarshal(line)
		if err != nil {
			skipped.n.Add(1)
			o.onError(&BadLineError{Source: name, Line: lr.line, Err: err})
			continue
		}
		if err := fn(s); err != nil {
			return err
		}
	}
}
