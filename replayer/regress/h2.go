package regress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

// isH2 reports whether a session's inbound exchange is an HTTP/2 stream
// (DESIGN.md 12: proto "grpc" or "http2", both halves in wire/http2's
// recorded form).
func isH2(s *recording.Session) bool {
	return s.Inbound.Proto == http2.GRPCName || s.Inbound.Proto == http2.Name
}

// maxH2Response bounds the data of one replayed HTTP/2 response.
const maxH2Response = 64 << 20

// h2Client sends HTTP/2 streams to one target: h2c with prior knowledge
// for http://, h2 over TLS (ALPN) for https://. One client serves every
// worker of a side: sessions in flight are streams of shared connections.
type h2Client struct {
	t    *target
	once sync.Once
	tr   *http.Transport
}

func (c *h2Client) transport() *http.Transport {
	c.once.Do(func() {
		var p http.Protocols
		tr := &http.Transport{Protocols: &p, DisableCompression: true, Proxy: nil,
			DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
		if c.t.tls {
			p.SetHTTP2(true)
			cfg := &tls.Config{}
			if c.t.tlsConfig != nil {
				cfg = c.t.tlsConfig.Clone()
			}
			cfg.ServerName = c.t.url.Hostname()
			tr.TLSClientConfig = cfg
		} else {
			p.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		}
		c.tr = tr
	})
	return c.tr
}

func (c *h2Client) close() {
	if c.tr != nil {
		c.tr.CloseIdleConnections()
	}
}

// h2Response is a replayed stream's response half.
type h2Response struct {
	msg http2.Message
}

// do sends the recorded request half req as one stream, with the trace and
// the recorded time as header fields (contract: retrace-trace-id,
// retrace-replay-time), and reads the whole response.
func (c *h2Client) do(ctx context.Context, req http2.Message, traceID string, at int64) (*h2Response, error) {
	hr, err := c.request(ctx, req, traceID, at)
	if err != nil {
		return nil, err
	}
	resp, err := c.transport().RoundTrip(hr)
	if err != nil {
		return nil, fmt.Errorf("HTTP/2 stream to %s: %w", c.t.addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxH2Response+1))
	if err != nil {
		return nil, fmt.Errorf("read HTTP/2 response from %s: %w", c.t.addr, err)
	}
	if len(data) > maxH2Response {
		return nil, fmt.Errorf("HTTP/2 response from %s: more than %d bytes of data", c.t.addr, maxH2Response)
	}
	m := http2.Message{Header: []hpack.HeaderField{{Name: ":status", Value: strconv.Itoa(resp.StatusCode)}}, Data: data, End: true}
	m.Header = appendFields(m.Header, resp.Header)
	if len(resp.Trailer) > 0 {
		m.Trailer = appendFields([]hpack.HeaderField{}, resp.Trailer)
	}
	return &h2Response{msg: m}, nil
}

// appendFields appends h's fields in lower case, sorted by name (the
// order HTTP/2 sent them in is not kept by net/http, and means nothing to
// the comparison).
func appendFields(dst []hpack.HeaderField, h http.Header) []hpack.HeaderField {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range h[k] {
			dst = append(dst, hpack.HeaderField{Name: strings.ToLower(k), Value: v})
		}
	}
	return dst
}

// connFields are not sent as recorded: HTTP/2 forbids them, or the
// connection decides them.
var connFields = map[string]bool{"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true, "host": true, "content-length": true}

// request builds the stream's request from the recorded half: its method
// and path (under the target's path prefix), every field but the
// pseudo-headers, the connection's own and retrace-* ones, the trace
// fields, its data and its trailers. The authority is the target's.
func (c *h2Client) request(ctx context.Context, m http2.Message, traceID string, at int64) (*http.Request, error) {
	method, _ := http2.Get(m.Header, ":method")
	path, ok := http2.Get(m.Header, ":path")
	if method == "" || !ok || !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("recorded HTTP/2 request has no :method or no :path in origin form (%q %q)", method, path)
	}
	scheme := "http"
	if c.t.tls {
		scheme = "https"
	}
	u, err := url.ParseRequestURI(c.t.prefix + path)
	if err != nil {
		return nil, fmt.Errorf("recorded :path %q: %w", path, err)
	}
	u.Scheme, u.Host = scheme, c.t.host
	h := http.Header{}
	for _, f := range m.Header {
		if f.IsPseudo() || connFields[f.Name] || strings.HasPrefix(f.Name, "retrace-") {
			continue
		}
		if f.Name == "te" && f.Value != "trailers" {
			continue
		}
		h[http.CanonicalHeaderKey(f.Name)] = append(h[http.CanonicalHeaderKey(f.Name)], f.Value)
	}
	h.Set(http2.TraceField, traceID)
	if at != 0 {
		h.Set(replayTimeField, strconv.FormatInt(at, 10))
	}
	hr, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(m.Data))
	if err != nil {
		return nil, fmt.Errorf("recorded HTTP/2 request: %w", err)
	}
	hr.Header, hr.Host = h, c.t.host
	if len(m.Data) == 0 {
		hr.Body, hr.ContentLength = http.NoBody, 0
	}
	if len(m.Trailer) > 0 {
		hr.Trailer = http.Header{}
		for _, f := range m.Trailer {
			if !strings.HasPrefix(f.Name, "retrace-") {
				hr.Trailer[http.CanonicalHeaderKey(f.Name)] = append(hr.Trailer[http.CanonicalHeaderKey(f.Name)], f.Value)
			}
		}
		// net/http sends a request's trailers only after a body of
		// unknown length.
		hr.ContentLength = -1
		hr.Body = io.NopCloser(bytes.NewReader(m.Data))
	}
	return hr, nil
}

// replayTimeField is ReplayTimeHeader as an HTTP/2 field.
const replayTimeField = "retrace-replay-time"

// h2Recorded is a session's recorded exchange, read for replay and
// comparison.
type h2Recorded struct {
	req     http2.Message
	path    string
	decoded wire.Decoded // the response half
	request wire.Decoded // the request half, for reports
}

// errRecordedH2 marks a recorded HTTP/2 exchange that cannot be replayed
// or compared.
var errRecordedH2 = errors.New("recorded HTTP/2 exchange")

// readH2 parses and decodes a session's recorded halves. A half that does
// not parse, or a response whose content does not decode, is an error: it
// could not be compared.
func (r *runner) readH2(s *recording.Session) (*h2Recorded, error) {
	req, _, err := http2.ParseMessage(s.Inbound.Request)
	if err != nil {
		return nil, fmt.Errorf("%w: request: %v", errRecordedH2, err)
	}
	if s.Inbound.ResponseTruncated {
		return nil, fmt.Errorf("%w: the response was truncated by the recorder; not compared", errRecordedH2)
	}
	resp, _, err := http2.ParseMessage(s.Inbound.Response)
	if err != nil {
		return nil, fmt.Errorf("%w: response: %v", errRecordedH2, err)
	}
	rec := &h2Recorded{req: req}
	rec.path, _ = http2.Get(req.Header, ":path")
	rec.request = http2.DecodeMessage(false, req, r.cfg.Schema, rec.path)
	if rec.decoded, err = http2.DecodeChecked(true, resp, r.cfg.Schema, rec.path); err != nil {
		return nil, fmt.Errorf("%w: response: %v", errRecordedH2, err)
	}
	return rec, nil
}

// decodeReplayed decodes a replayed response like the recorded one; what
// does not decode is an error (the session is not compared).
func (r *runner) decodeReplayed(rec *h2Recorded, a *attempt) error {
	if a.h2 == nil {
		return nil
	}
	d, err := http2.DecodeChecked(true, a.h2.msg, r.cfg.Schema, rec.path)
	a.h2dec = &d
	if err != nil {
		return fmt.Errorf("replayed response: %w", err)
	}
	return nil
}

// h2Status is the part of a decoded response a flaky server changes:
// its :status and grpc-status.
func h2Status(d *wire.Decoded) string {
	var st, gs string
	for _, f := range d.Fields {
		switch f.Path {
		case "status":
			st = f.Value
		case "grpc-status":
			gs = f.Value
		}
	}
	return st + "/" + gs
}

// compareCall diffs the request of a downstream call with the recorded
// one it matched. HTTP/2 and gRPC streams are decoded here, with the
// schema when there is one (messages by field name), and compared field by
// field; their decoded forms are returned for the report. Every other
// protocol is compared by diff.CompareCalls.
func compareCall(rules *diff.Rules, schema *descriptors.Schema, api, proto, dst string, want, got []byte) ([]diff.Difference, *wire.Decoded, *wire.Decoded) {
	if proto != http2.GRPCName && proto != http2.Name {
		return rules.CompareCalls(api, proto, dst, want, got), nil, nil
	}
	w, _, err1 := http2.ParseMessage(want)
	g, _, err2 := http2.ParseMessage(got)
	if err1 != nil || err2 != nil {
		return rules.CompareCalls(api, proto, dst, want, got), nil, nil
	}
	wd := http2.DecodeMessage(false, w, schema, "")
	gd := http2.DecodeMessage(false, g, schema, "")
	if bytes.Equal(want, got) {
		return nil, &wd, &gd
	}
	return rules.CompareDecoded(api, diff.ScopeDownstream, dst, http2.Comparable(wd), http2.Comparable(gd)), &wd, &gd
}

// h2RequestLine is the method and path of a request half in the recorded
// form, "" when it is not one.
func h2RequestLine(raw []byte) (method, path string, ok bool) {
	if len(raw) == 0 || raw[0] != ':' {
		return "", "", false
	}
	m, _, err := http2.ParseMessage(raw)
	if err != nil {
		return "", "", false
	}
	method, _ = http2.Get(m.Header, ":method")
	path, _ = http2.Get(m.Header, ":path")
	return method, path, method != ""
}
