package load

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KindGRPC is a gRPC call: URL is the method's path
// ("/pkg.Service/Method"), Header its metadata, Body its request messages
// with their gRPC length prefixes, as the recording holds them.
const KindGRPC = "grpc"

// gRPC status codes that say the server failed (counted as errors); the
// others (NOT_FOUND, INVALID_ARGUMENT, …) are answers, as HTTP 4xx are.
var grpcFailCodes = map[int]bool{2: true, 4: true, 12: true, 13: true, 14: true, 15: true}

// grpcExecutor sends KindGRPC requests as HTTP/2 streams: h2c with prior
// knowledge to an http:// target, h2 over TLS to an https:// one. Streams
// share the transport's connections (one per target while the server's
// stream limit allows), as a gRPC client's would.
type grpcExecutor struct {
	base       *url.URL
	tr         *http.Transport
	traces     *traceIDs
	replayTime bool
	closeOnce  sync.Once
}

func newGRPCExecutor(base *url.URL, tlsCfg *tls.Config, traces *traceIDs, replayTime bool) *grpcExecutor {
	var p http.Protocols
	tr := &http.Transport{Protocols: &p, DisableCompression: true, Proxy: nil,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
	if base.Scheme == "https" {
		p.SetHTTP2(true)
		if tlsCfg != nil {
			tr.TLSClientConfig = tlsCfg.Clone()
		}
	} else {
		p.SetUnencryptedHTTP2(true) // h2c with prior knowledge
	}
	return &grpcExecutor{base: base, tr: tr, traces: traces, replayTime: replayTime}
}

// grpcOutcome is Outcome.Status for a gRPC answer: its grpc-status, offset
// so that it never reads as an HTTP status (results count it as
// "grpc-<code>").
const grpcOutcome = 1 << 16

func (e *grpcExecutor) Execute(ctx context.Context, r *Request) Outcome {
	req, err := e.newRequest(ctx, r)
	if err != nil {
		return Outcome{Err: err}
	}
	resp, err := e.tr.RoundTrip(req)
	if err != nil {
		return Outcome{Err: err}
	}
	bp := discardBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(io.Discard, resp.Body, *bp)
	discardBufs.Put(bp)
	resp.Body.Close()
	if err != nil {
		return Outcome{Status: resp.StatusCode, Err: fmt.Errorf("reading gRPC response: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		return Outcome{Status: resp.StatusCode, Err: fmt.Errorf("HTTP status %d (not a gRPC answer)", resp.StatusCode)}
	}
	st := resp.Trailer.Get("Grpc-Status")
	if st == "" {
		st = resp.Header.Get("Grpc-Status") // trailers-only
	}
	code, err := strconv.Atoi(st)
	if err != nil || code < 0 || code >= grpcOutcome {
		return Outcome{Status: resp.StatusCode, Err: fmt.Errorf("gRPC answer without a valid grpc-status (%q)", st)}
	}
	o := Outcome{Status: grpcOutcome + code}
	if grpcFailCodes[code] {
		msg := resp.Trailer.Get("Grpc-Message")
		if msg == "" {
			msg = resp.Header.Get("Grpc-Message")
		}
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m
		}
		o.Err = fmt.Errorf("grpc-status %d: %s", code, msg)
	}
	return o
}

// grpcConnFields are not sent as recorded: the stream decides them.
var grpcConnFields = map[string]bool{"Host": true, "Content-Length": true, "Connection": true, "Te": true,
	"Content-Type": true, "Transfer-Encoding": true, "Keep-Alive": true, "Upgrade": true}

func (e *grpcExecutor) newRequest(ctx context.Context, r *Request) (*http.Request, error) {
	if !strings.HasPrefix(r.URL, "/") {
		return nil, fmt.Errorf("grpc request url %q is not a method path (/package.Service/Method)", r.URL)
	}
	u := *e.base
	u.Path = strings.TrimSuffix(e.base.Path, "/") + r.URL
	u.RawQuery = ""
	h := make(http.Header, len(r.Header)+4)
	ct := "application/grpc"
	for k, v := range r.Header {
		ck := http.CanonicalHeaderKey(k)
		if ck == "Content-Type" && len(v) > 0 && strings.HasPrefix(v[0], "application/grpc") {
			ct = v[0]
		}
		if !grpcConnFields[ck] && !strings.HasPrefix(ck, "Retrace-") {
			h[ck] = v
		}
	}
	h.Set("Content-Type", ct)
	h.Set("Te", "trailers")
	if e.traces != nil {
		tid, err := e.traces.next(r.ID)
		if err != nil {
			return nil, err
		}
		h.Set(traceHeader, tid)
		if e.replayTime && !r.At.IsZero() {
			h.Set(replayTimeHeader, strconv.FormatInt(r.At.UnixNano(), 10))
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(r.Body))
	if err != nil {
		return nil, fmt.Errorf("grpc request %s: %w", r.URL, err)
	}
	req.Header = h
	return req, nil
}

func (e *grpcExecutor) Close() error {
	e.closeOnce.Do(e.tr.CloseIdleConnections)
	return nil
}
