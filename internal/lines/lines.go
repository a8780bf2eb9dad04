// Package lines reads a stream line by line with a cap on the length of a
// line, so that memory stays bounded however large the input: bufio.Scanner
// fails at its buffer size, and an unbounded ReadBytes lets one corrupt line
// without newlines eat the heap. Recordings, timed-request files and logs
// are all read with it.
package lines

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Reader yields the lines of a stream one at a time.
type Reader struct {
	r   *bufio.Reader
	max int
	buf []byte
	n   int
}

// NewReader returns a Reader of r with a read buffer of size bytes that
// keeps at most max bytes of a line (its newline not counted).
func NewReader(r io.Reader, size, max int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, size), max: max}
}

// Next returns the next line without the "\r" and "\n" that end it; the
// slice is valid until the following call. A line longer than max comes
// back cut to its first max bytes with tooLong set, and the rest of it is
// skipped. A last line without a newline is a line. At the end Next returns
// io.EOF; other errors are the underlying reader's.
func (l *Reader) Next() (line []byte, tooLong bool, err error) {
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if err == nil {
			chunk = chunk[:len(chunk)-1] // the newline does not count
		}
		if room := l.max - len(l.buf); len(chunk) > room {
			tooLong = true
			if room > 0 {
				l.buf = append(l.buf, chunk[:room]...)
			}
		} else {
			l.buf = append(l.buf, chunk...)
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(l.buf) == 0 && !tooLong {
				return nil, false, io.EOF
			}
		default:
			return nil, false, err
		}
		l.n++
		return bytes.TrimRight(l.buf, "\r\n"), tooLong, nil
	}
}

// Line is the 1-based number of the line Next returned last.
func (l *Reader) Line() int { return l.n }
