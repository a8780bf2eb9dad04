package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrace-dev/retrace/trace"
)

// The headers of DESIGN.md 3.2, as net/http canonicalises them.
const (
	traceHeader      = "Retrace-Trace-Id"
	replayTimeHeader = "Retrace-Replay-Time"
)

// traceIDs hands out the trace ids of ExecutorConfig.Traces: the
// recording's id, "._", a per-process random tag and a sequence number in
// base 36. The tag keeps the ids of two runs against one mock server (or of
// two shards) apart; the sequence, those of one run.
type traceIDs struct {
	tag string
	seq atomic.Uint64
}

func newTraceIDs(on bool) *traceIDs {
	if !on {
		return nil
	}
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 5)
	for i := range b {
		b[i] = digits[rand.IntN(len(digits))]
	}
	return &traceIDs{tag: string(b)}
}

func (t *traceIDs) next(rec string) (string, error) {
	if rec == "" {
		return "", fmt.Errorf("request has no recording id to send it under (extract it from recordings, which keeps each session's id)")
	}
	tid, ok := trace.Alias(rec, t.tag+strconv.FormatUint(t.seq.Add(1), 36))
	if !ok {
		return "", fmt.Errorf("request id %q is not a recording id a trace id can derive from: [0-9A-Za-z._-], short enough for %q and the suffix to fit in %d characters", rec, trace.AliasSep, trace.MaxIDLen)
	}
	return tid, nil
}

// HTTPExecutor sends KindHTTP requests with a keep-alive client whose pool
// holds as many connections as requests in flight, and KindGRPC requests
// as HTTP/2 streams to the same target (h2c with prior knowledge for
// http://, h2 over TLS for https://) on shared connections.
type HTTPExecutor struct {
	base       *url.URL
	client     *http.Client
	transport  *http.Transport
	failStatus int
	closeOnce  sync.Once
	traces     *traceIDs // nil: no trace ids sent
	replayTime bool
	grpc       *grpcExecutor // KindGRPC requests, as HTTP/2 streams to the same target
}

var _ Executor = (*HTTPExecutor)(nil)

// NewHTTPExecutor returns an executor sending to target (scheme://host:port
// and an optional path prefix).
func NewHTTPExecutor(target string, cfg ExecutorConfig) (*HTTPExecutor, error) {
	cfg = cfg.withDefaults()
	base, err := url.Parse(target)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
		return nil, fmt.Errorf("bad HTTP target %q (want http://HOST:PORT)", target)
	}
	tr := &http.Transport{
		Proxy: nil, // a load test goes where it is told
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          cfg.Concurrency,
		MaxIdleConnsPerHost:   cfg.Concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // measure the bytes the target sends, don't inflate them
		ForceAttemptHTTP2:     false,
		WriteBufferSize:       16 << 10,
		ReadBufferSize:        16 << 10,
	}
	traces := newTraceIDs(cfg.Traces)
	return &HTTPExecutor{
		base:      base,
		transport: tr,
		client: &http.Client{
			Transport: tr,
			Timeout:   cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse // a redirect is the answer, as in production
			},
		},
		failStatus: cfg.FailStatus,
		traces:     traces,
		replayTime: cfg.ReplayTime,
		grpc:       newGRPCExecutor(base, nil, traces, cfg.ReplayTime),
	}, nil
}

// discardBufs are the buffers response bodies are drained through.
var discardBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Execute implements Executor.
func (e *HTTPExecutor) Execute(ctx context.Context, r *Request) Outcome {
	if k := r.EffectiveKind(); k == KindGRPC {
		return e.grpc.Execute(ctx, r)
	} else if k != KindHTTP {
		return Outcome{Err: fmt.Errorf("request of kind %q cannot run on HTTP target %s", k, e.base.Redacted())}
	}
	req, err := e.newRequest(ctx, r)
	if err != nil {
		return Outcome{Err: err}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return Outcome{Err: err}
	}
	bp := discardBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(io.Discard, resp.Body, *bp)
	discardBufs.Put(bp)
	resp.Body.Close()
	if err != nil {
		return Outcome{Status: resp.StatusCode, Err: fmt.Errorf("reading response body: %w", err)}
	}
	if resp.StatusCode >= e.failStatus {
		return Outcome{Status: resp.StatusCode, Err: fmt.Errorf("HTTP status %d", resp.StatusCode)}
	}
	return Outcome{Status: resp.StatusCode}
}

// newRequest resolves r.URL against the target: scheme and host always
// come from the target, the path is the target's prefix joined with the
// request's.
func (e *HTTPExecutor) newRequest(ctx context.Context, r *Request) (*http.Request, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, fmt.Errorf("bad url %q: %w", r.URL, err)
	}
	u.Scheme, u.Host, u.User = e.base.Scheme, e.base.Host, e.base.User
	if p := strings.TrimSuffix(e.base.Path, "/"); p != "" {
		u.Path = p + u.Path
		if u.RawPath != "" {
			u.RawPath = p + u.RawPath
		}
	}
	req := &http.Request{
		Method:     r.HTTPMethod(),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     r.Header,
		Host:       u.Host,
	}
	// The request's header map is used as is unless it holds headers the
	// connection decides (most requests: no copy).
	for k := range r.Header {
		if _, special := connHeaders[http.CanonicalHeaderKey(k)]; special {
			req.Header = filterHeader(r.Header, &req.Host)
			break
		}
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	if e.traces != nil {
		tid, err := e.traces.next(r.ID)
		if err != nil {
			return nil, err
		}
		h := make(http.Header, len(req.Header)+2)
		for k, v := range req.Header {
			h[k] = v
		}
		h[traceHeader] = []string{tid}
		if e.replayTime && !r.At.IsZero() {
			h[replayTimeHeader] = []string{strconv.FormatInt(r.At.UnixNano(), 10)}
		}
		req.Header = h
	}
	if len(r.Body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(r.Body))
		req.ContentLength = int64(len(r.Body))
		body := r.Body
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	if ctx.Done() != nil { // a context that can end; Run's cannot, and a copy of the request costs an allocation
		req = req.WithContext(ctx)
	}
	return req, nil
}

// connHeaders are not sent as recorded: Host sets the request's host, the
// others belong to the connection or are recomputed.
var connHeaders = map[string]struct{}{"Host": {}, "Content-Length": {}, "Connection": {}, "Transfer-Encoding": {},
	"Keep-Alive": {}, "Te": {}, "Upgrade": {}, "Proxy-Connection": {}}

func filterHeader(h http.Header, host *string) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		ck := http.CanonicalHeaderKey(k)
		if ck == "Host" && len(v) > 0 && v[0] != "" {
			*host = v[0]
		}
		if _, special := connHeaders[ck]; !special {
			out[k] = v
		}
	}
	return out
}

// Close implements Executor.
func (e *HTTPExecutor) Close() error {
	e.closeOnce.Do(func() {
		e.transport.CloseIdleConnections()
		e.grpc.Close()
	})
	return nil
}
