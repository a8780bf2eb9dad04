package regress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http1"
)

// Header names of DESIGN.md 3.2.
const (
	TraceHeader        = "Retrace-Trace-Id"
	ReplayTimeHeader   = "Retrace-Replay-Time"
	ReplaySeedHeader   = "Retrace-Replay-Seed"
	ReplayRandomHeader = "Retrace-Replay-Random"
)

// replayed is what a replayed request carries of its recording besides its
// bytes: the recorded time and randomness (DESIGN.md 3.2).
type replayed struct {
	time   int64             // unix ns, 0 for none
	random *recording.Random // nil for none
}

// appendRandom appends the Retrace-Replay-Seed and Retrace-Replay-Random
// header lines of r (each with its leading CRLF). Draws that do not fit
// the agent's bound are not sent: the replay diverges there, and says so.
func appendRandom(dst []byte, r *recording.Random) []byte {
	if r == nil {
		return dst
	}
	dst = append(dst, "\r\n"+ReplaySeedHeader+": "...)
	dst = append(dst, trace.ReplaySeed{Seed: r.Seed, Draws: &[2]uint64{r.Math, r.MathV2}}.String()...)
	if len(r.Crypto) == 0 {
		return dst
	}
	dst = append(dst, "\r\n"+ReplayRandomHeader+": "...)
	start := len(dst)
	dst = trace.AppendReplayRandom(dst, r.Crypto)
	if len(dst)-start > trace.MaxReplayRandom {
		dst = dst[:start-len("\r\n"+ReplayRandomHeader+": ")]
	}
	return dst
}

// target is where replayed requests go: one parsed --target or --baseline.
type target struct {
	url    *url.URL
	addr   string // host:port to dial
	host   string // Host header value
	prefix string // path prefix prepended to origin-form request targets
	tls    bool
	// tlsConfig is Config.TLS, nil for the system's roots
	tlsConfig *tls.Config
}

func parseTarget(raw string) (*target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", raw, err)
	}
	t := &target{url: u, host: u.Host, prefix: strings.TrimSuffix(u.Path, "/")}
	switch u.Scheme {
	case "http":
		t.addr = hostPort(u, "80")
	case "https":
		t.addr, t.tls = hostPort(u, "443"), true
	default:
		return nil, fmt.Errorf("target %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("target %q: no host", raw)
	}
	return t, nil
}

func hostPort(u *url.URL, port string) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// buildRequest rewrites a recorded request for t: the Retrace headers are
// inserted right after the request line, Host names the target, Retrace-*
// headers of the recording are dropped, and the body is kept byte for byte.
func (t *target) buildRequest(dst, raw []byte, traceID string, rp replayed) ([]byte, string, error) {
	// Lines end in LF with an optional CR, as HTTP servers read them; the
	// header ends at the first empty line.
	line, rest, ok := bytes.Cut(raw, []byte("\n"))
	if !ok {
		return nil, "", errors.New("recorded request has no complete header")
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	f := bytes.Fields(line)
	if len(f) != 3 || !bytes.HasPrefix(f[2], []byte("HTTP/1.")) {
		return nil, "", fmt.Errorf("recorded request line %q is not HTTP/1.x", excerptLine(line))
	}
	method := string(f[0])
	dst = append(dst, f[0]...)
	dst = append(dst, ' ')
	reqTarget := f[1]
	if i := bytes.Index(reqTarget, []byte("://")); i > 0 && reqTarget[0] != '/' {
		// absolute form (a request made to a proxy): the target is the
		// service itself, so send the origin form.
		rest := reqTarget[i+3:]
		if j := bytes.IndexByte(rest, '/'); j >= 0 {
			reqTarget = rest[j:]
		} else {
			reqTarget = []byte("/")
		}
	}
	if t.prefix != "" && len(reqTarget) > 0 && reqTarget[0] == '/' {
		dst = append(dst, t.prefix...)
	}
	dst = append(dst, reqTarget...)
	dst = append(dst, ' ')
	dst = append(dst, f[2]...)
	dst = append(dst, "\r\n"+TraceHeader+": "...)
	dst = append(dst, traceID...)
	if rp.time != 0 {
		dst = append(dst, "\r\n"+ReplayTimeHeader+": "...)
		dst = strconv.AppendInt(dst, rp.time, 10)
	}
	dst = appendRandom(dst, rp.random)
	dst = append(dst, "\r\n"...)
	sawHost := false
	body, complete := []byte(nil), false
	for len(rest) > 0 {
		h, next, _ := bytes.Cut(rest, []byte("\n"))
		rest = next
		h = bytes.TrimSuffix(h, []byte("\r"))
		if len(h) == 0 {
			body, complete = rest, true
			break
		}
		name, _, ok := bytes.Cut(h, []byte(":"))
		name = bytes.TrimSpace(name)
		switch {
		case !ok || len(name) == 0:
			continue // not a header line
		case len(name) >= 8 && strings.EqualFold(string(name[:8]), "retrace-"):
			continue
		case strings.EqualFold(string(name), "host"):
			sawHost = true
			dst = append(dst, "Host: "...)
			dst = append(dst, t.host...)
		default:
			dst = append(dst, h...)
		}
		dst = append(dst, "\r\n"...)
	}
	if !complete {
		return nil, "", errors.New("recorded request has no complete header")
	}
	if !sawHost {
		dst = append(dst, "Host: "...)
		dst = append(dst, t.host...)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, body...)
	return dst, method, nil
}

func excerptLine(b []byte) string {
	if len(b) > 80 {
		b = b[:80]
	}
	return string(b)
}

// client sends requests to one target over one kept-alive connection; each
// worker owns one client per target, so concurrency N means N connections.
type client struct {
	t       *target
	timeout time.Duration
	conn    net.Conn
	br      *bufio.Reader
	used    bool // the connection has carried a request before
	buf     []byte
}

func (c *client) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

func (c *client) dial(ctx context.Context) error {
	d := &net.Dialer{Timeout: c.timeout}
	conn, err := d.DialContext(ctx, "tcp", c.t.addr)
	if err != nil {
		return err
	}
	if c.t.tls {
		cfg := &tls.Config{}
		if c.t.tlsConfig != nil {
			cfg = c.t.tlsConfig.Clone()
		}
		cfg.ServerName, cfg.NextProtos = c.t.url.Hostname(), []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		tc.SetDeadline(time.Now().Add(c.timeout))
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return err
		}
		conn = tc
	}
	c.conn, c.br, c.used = conn, bufio.NewReaderSize(conn, 32<<10), false
	return nil
}

// do sends one recorded request and reads the response. A request that
// fails on a reused connection before any response byte arrived (the
// server closed it while idle) is sent once more on a new connection.
func (c *client) do(ctx context.Context, raw []byte, traceID string, rp replayed) (*http1.ParsedResponse, error) {
	req, method, err := c.t.buildRequest(c.buf[:0], raw, traceID, rp)
	if err != nil {
		return nil, err
	}
	c.buf = req
	for attempt := 0; ; attempt++ {
		if c.conn == nil {
			if err := c.dial(ctx); err != nil {
				return nil, fmt.Errorf("connect %s: %w", c.t.addr, err)
			}
		}
		reused := c.used
		resp, err := c.roundTrip(ctx, req, method)
		if err == nil {
			c.used = true
			if resp.Close {
				c.close()
			}
			return resp, nil
		}
		c.close()
		var idle *idleClosed
		if reused && attempt == 0 && errors.As(err, &idle) {
			continue
		}
		return nil, err
	}
}

// idleClosed is a connection that ended before the first response byte.
type idleClosed struct{ err error }

func (e *idleClosed) Error() string { return e.err.Error() }
func (e *idleClosed) Unwrap() error { return e.err }

func (c *client) roundTrip(ctx context.Context, req []byte, method string) (*http1.ParsedResponse, error) {
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.conn.SetDeadline(deadline)
	// The connection, not c.conn: the callback can run after roundTrip has
	// returned and the caller has closed and cleared c.conn.
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.conn.Write(req); err != nil {
		return nil, &idleClosed{fmt.Errorf("send to %s: %w", c.t.addr, err)}
	}
	if _, err := c.br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) || isReset(err) {
			return nil, &idleClosed{fmt.Errorf("read from %s: %w", c.t.addr, err)}
		}
		return nil, fmt.Errorf("read from %s: %w", c.t.addr, timeoutErr(err, c.timeout))
	}
	resp, err := http1.ReadResponse(c.br, method)
	if err != nil {
		return nil, fmt.Errorf("read response from %s: %w", c.t.addr, timeoutErr(err, c.timeout))
	}
	return resp, nil
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

func timeoutErr(err error, d time.Duration) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("timeout after %v: %w", d, err)
	}
	return err
}
