package extract

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/load"
	"github.com/retrace-dev/retrace/wire/http2"
)

// SessionReader is what Recordings reads: recording.Reader's Scan.
type SessionReader interface {
	Scan(ctx context.Context, fn func(*recording.Session) error) error
}

// Recordings is a Source of the inbound HTTP requests of recorded sessions.
type Recordings struct {
	Name string
	// Open opens the store; onBad is to receive the store's lines that do
	// not decode (recording.WithErrorHandler).
	Open func(ctx context.Context, onBad func(error)) (SessionReader, error)
}

// Scan implements Source.
func (rs *Recordings) Scan(ctx context.Context, fn func(*load.Request) error, bad func(BadLine)) error {
	rd, err := rs.Open(ctx, func(err error) { bad(BadLine{Source: rs.Name, Err: err}) })
	if err != nil {
		return err
	}
	if c, ok := rd.(io.Closer); ok {
		defer c.Close()
	}
	return rd.Scan(ctx, func(s *recording.Session) error {
		if s.Background {
			return nil // no inbound request: start-up and background traffic
		}
		req, err := SessionRequest(s)
		if err != nil {
			bad(BadLine{Source: rs.Name + " session " + s.ID, Err: err})
			return nil
		}
		return fn(req)
	})
}

// hopHeaders are not replayed: the executor's connection decides them, and
// Retrace-* belongs to regression replay.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer",
	"Upgrade", "Content-Length", "Host"}

// SessionRequest turns the inbound request of a session into a timed
// request: sent at the session's start, with its method, request URI,
// end-to-end headers and body. The recorded Host is dropped (the load target
// decides it; prepare --host sets one).
//
// A gRPC session is a KindGRPC request: its method path, its metadata and
// its request messages as recorded.
func SessionRequest(s *recording.Session) (*load.Request, error) {
	if s.Inbound.Proto == http2.GRPCName {
		return grpcRequest(s)
	}
	if s.Inbound.Proto != "" && s.Inbound.Proto != "http" {
		return nil, fmt.Errorf("inbound protocol %q is neither http nor grpc", s.Inbound.Proto)
	}
	if s.Inbound.RequestTruncated {
		return nil, errors.New("inbound request was truncated by the recorder")
	}
	if len(s.Inbound.Request) == 0 {
		return nil, errors.New("session has no inbound request")
	}
	hr, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(s.Inbound.Request)))
	if err != nil {
		return nil, fmt.Errorf("inbound request: %w", err)
	}
	body, err := io.ReadAll(hr.Body)
	if err != nil {
		return nil, fmt.Errorf("inbound request body: %w", err)
	}
	h := hr.Header.Clone()
	for _, k := range hopHeaders {
		delete(h, k)
	}
	for k := range h {
		if strings.HasPrefix(k, "Retrace-") {
			delete(h, k)
		}
	}
	if len(h) == 0 {
		h = nil
	}
	req := &load.Request{
		At:     s.At.Add(time.Duration(s.Inbound.StartNs)),
		ID:     s.ID,
		Kind:   load.KindHTTP,
		Method: hr.Method,
		URL:    hr.RequestURI,
		Header: h,
	}
	if len(body) > 0 {
		req.Body = body
	}
	return req, req.Validate()
}

// NewRecordingFiles is a Source of recordings stored as JSONL (schema v1):
// one file or stream r named name. It stands in for the recording package's
// stores where only a file is at hand.
func NewRecordingFiles(name string, r io.Reader) Source {
	return &Lines{Name: name, R: r, Parse: func(line []byte, _ string, _ int) (*load.Request, error) {
		s, err := recording.Unmarshal(line)
		if err != nil {
			return nil, err
		}
		return SessionRequest(s)
	}}
}

// grpcRequest turns a recorded gRPC session into a timed request.
func grpcRequest(s *recording.Session) (*load.Request, error) {
	if s.Inbound.RequestTruncated {
		return nil, errors.New("inbound request was truncated by the recorder")
	}
	m, _, err := http2.ParseMessage(s.Inbound.Request)
	if err != nil {
		return nil, fmt.Errorf("inbound gRPC request: %w", err)
	}
	path, _ := http2.Get(m.Header, ":path")
	h := http.Header{}
	for _, f := range m.Header {
		if f.IsPseudo() || strings.HasPrefix(f.Name, "retrace-") {
			continue
		}
		switch f.Name {
		case "content-length", "te", "connection", "host", "grpc-timeout":
			continue // the stream's own; a recorded deadline would be stale
		}
		h.Add(f.Name, f.Value)
	}
	if len(h) == 0 {
		h = nil
	}
	req := &load.Request{
		At:     s.At.Add(time.Duration(s.Inbound.StartNs)),
		ID:     s.ID,
		Kind:   load.KindGRPC,
		URL:    path,
		Header: h,
		Body:   m.Data,
	}
	return req, req.Validate()
}
