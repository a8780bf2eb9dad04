package recording

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// Summary describes the sessions of a store.
type Summary struct {
	Sessions   int            `json:"sessions"`
	Calls      int            `json:"calls"`
	SetupCalls int            `json:"setup_calls"`
	ByProto    map[string]int `json:"calls_by_proto"`
	Apps       map[string]int `json:"sessions_by_app"`
	Truncated  int            `json:"truncated_sessions"`
	Skipped    int64          `json:"skipped_lines"`
	First      time.Time      `json:"first"`
	Last       time.Time      `json:"last"`
}

// Summarize scans r and counts what it holds. Skipped lines are counted when
// r is one of this package's stores.
func Summarize(ctx context.Context, r Reader) (Summary, error) {
	sum := Summary{ByProto: map[string]int{}, Apps: map[string]int{}}
	var before int64
	sk, counts := r.(interface{ Skipped() int64 })
	if counts {
		before = sk.Skipped()
	}
	err := r.Scan(ctx, func(s *Session) error {
		sum.Sessions++
		sum.Apps[s.App]++
		if sum.First.IsZero() || s.At.Before(sum.First) {
			sum.First = s.At
		}
		if s.At.After(sum.Last) {
			sum.Last = s.At
		}
		trunc := s.Inbound.RequestTruncated || s.Inbound.ResponseTruncated
		for _, c := range s.Calls {
			sum.Calls++
			sum.ByProto[c.Proto]++
			if c.Setup {
				sum.SetupCalls++
			}
			trunc = trunc || c.RequestTruncated || c.ResponseTruncated
		}
		if trunc {
			sum.Truncated++
		}
		return nil
	})
	if counts {
		sum.Skipped = sk.Skipped() - before
	}
	return sum, err
}

// Copy writes every session of src to dst, in batches, and flushes dst. It
// returns how many sessions it copied. Use it to pre-warm a Redis store for
// mock servers from a directory of recordings.
func Copy(ctx context.Context, dst Writer, src Reader) (int, error) {
	const batch = 256
	var buf []*Session
	n := 0
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		if err := dst.Write(ctx, buf); err != nil {
			return err
		}
		n += len(buf)
		buf = buf[:0]
		return nil
	}
	err := src.Scan(ctx, func(s *Session) error {
		buf = append(buf, s)
		if len(buf) == batch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = dst.Flush(ctx)
	}
	return n, err
}

// RequestLine returns the first line of the session's inbound request
// ("GET /orders HTTP/1.1"), and StatusLine the first line of its response,
// for listings.
func (s *Session) RequestLine() string { return firstLine(s.Inbound.Request) }

// StatusLine returns the first line of the inbound response.
func (s *Session) StatusLine() string { return firstLine(s.Inbound.Response) }

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	b = bytes.TrimRight(b, "\r")
	if len(b) > 200 {
		return fmt.Sprintf("%s…", b[:200])
	}
	return string(b)
}
