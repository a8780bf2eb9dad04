package extract

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/retrace-dev/retrace/internal/lines"
	"github.com/retrace-dev/retrace/replayer/load"
)

// MaxLine is the longest source line parsed; longer lines are reported as
// bad and skipped.
const MaxLine = 64 << 20

// LineParser turns one line of a log into a request. lineNo is 1-based; name
// is the source name (for request ids).
type LineParser func(line []byte, name string, lineNo int) (*load.Request, error)

// Lines is a Source of one stream of log lines (gzip-compressed when Name
// ends in .gz), each parsed by Parse. Blank lines are skipped.
type Lines struct {
	Name  string
	R     io.Reader
	Parse LineParser
}

// Scan implements Source.
func (l *Lines) Scan(ctx context.Context, fn func(*load.Request) error, bad func(BadLine)) error {
	r := l.R
	if strings.HasSuffix(l.Name, ".gz") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("%s: %w", l.Name, err)
		}
		defer zr.Close()
		r = zr
	}
	lr := lines.NewReader(r, 256<<10, MaxLine)
	for {
		line, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", l.Name, err)
		}
		lineNo := lr.Line()
		if lineNo%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if tooLong {
			bad(BadLine{l.Name, lineNo, fmt.Errorf("line longer than %d bytes", MaxLine)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		req, err := l.Parse(line, l.Name, lineNo)
		if err != nil {
			bad(BadLine{l.Name, lineNo, err})
			continue
		}
		if err := req.Validate(); err != nil {
			bad(BadLine{l.Name, lineNo, err})
			continue
		}
		if err := fn(req); err != nil {
			return err
		}
	}
}
