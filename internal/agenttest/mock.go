package agenttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/retrace-dev/retrace/wire/redis"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/trace"
)

// Proto is the protocol the mock speaks for one destination.
type Proto int

// Protocols of the mock.
const (
	ProtoLine Proto = iota + 1
	ProtoRESP
	ProtoHTTP
)

// Mock is a test mock server for replay mode: it reads the agent's frames,
// checks each against the trace ids its payload names, and answers the
// protocol of the connection's destination (from the preamble).
type Mock struct {
	Addr   string
	ln     net.Listener
	protos map[string]Proto
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	st     MockStats
}

// MockStats is what the mock observed.
type MockStats struct {
	Conns     int
	Preambles int
	Frames    int // frames with payload
	Tagged    int // frames whose payload names at least one trace id
	Untraced  int // frames with an empty tid
	// Misattributed lists frames whose tid differs from an id named in
	// their payload.
	Misattributed []string
	// Leaks lists HTTP payloads that still carry a Retrace-* header.
	Leaks []string
	// Errors lists protocol errors: no preamble, unknown destination, bad
	// frame, bad request.
	Errors []string
}

// StartMock starts a mock on 127.0.0.1 (addr "" picks a port) answering
// each destination ("ip:port", as the agent reports it) in its protocol.
func StartMock(addr string, protos map[string]Proto) (*Mock, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &Mock{Addr: ln.Addr().String(), ln: ln, protos: protos, conns: map[net.Conn]bool{}}
	m.wg.Add(1)
	go m.accept()
	return m, nil
}

// NewMock starts a mock closed at the end of the test.
func NewMock(t testing.TB, protos map[string]Proto) *Mock {
	t.Helper()
	m, err := StartMock("", protos)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// Stats returns a copy of the observations so far.
func (m *Mock) Stats() MockStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.st
	s.Misattributed = append([]string(nil), s.Misattributed...)
	s.Leaks = append([]string(nil), s.Leaks...)
	s.Errors = append([]string(nil), s.Errors...)
	return s
}

// Close stops the mock and waits for its goroutines.
func (m *Mock) Close() {
	m.ln.Close()
	m.mu.Lock()
	for c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

func (m *Mock) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		m.conns[c] = true
		m.st.Conns++
		m.mu.Unlock()
		m.wg.Add(1)
		go m.serve(c)
	}
}

func (m *Mock) errorf(format string, args ...any) {
	m.mu.Lock()
	m.st.Errors = append(m.st.Errors, fmt.Sprintf(format, args...))
	m.mu.Unlock()
}

func (m *Mock) serve(c net.Conn) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.conns, c)
		m.mu.Unlock()
		c.Close()
	}()
	fr := trace.NewFrameReader(c, 0)
	h, p, err := fr.Next()
	if err != nil {
		if err != io.EOF {
			m.errorf("first frame: %v", err)
		}
		return
	}
	if h.Len != 0 || len(p) != 0 {
		m.errorf("connection to %s did not start with a preamble", h.Dst)
		return
	}
	dst := h.Dst
	if dst == trace.TLSDst {
		m.serveTLS(fr, c)
		return
	}
	proto := m.protos[dst]
	if proto == 0 {
		m.errorf("preamble names unknown destination %s", dst)
		return
	}
	m.mu.Lock()
	m.st.Preambles++
	m.mu.Unlock()
	var buf []byte
	for {
		h, p, err := fr.Next()
		if err != nil {
			if err != io.EOF && !errors.Is(err, net.ErrClosed) {
				m.errorf("frame from %s: %v", dst, err)
			}
			return
		}
		if h.Dst != dst {
			m.errorf("frame names %s on a connection to %s", h.Dst, dst)
		}
		m.check(h, p, proto)
		buf = append(buf, p...)
		var out []byte
		buf, out, err = answer(proto, buf)
		if err != nil {
			m.errorf("%s: %v", dst, err)
			return
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}
}

// serveTLS answers an agent's questions for recorded TLS facts
// (trace.TLSDst) as a mock server with no recording of TLS does.
func (m *Mock) serveTLS(fr *trace.FrameReader, c net.Conn) {
	for {
		_, p, err := fr.Next()
		if err != nil {
			return
		}
		if len(p) == 0 {
			continue
		}
		if _, err := c.Write([]byte(`{"reason":"the agenttest mock keeps no TLS facts"}` + "\n")); err != nil {
			return
		}
	}
}

// check records whether the frame's tid is the trace named in its payload.
func (m *Mock) check(h trace.FrameHeader, p []byte, proto Proto) {
	if len(p) == 0 {
		return
	}
	tagged := false
	var wrong []byte
	eachID(p, func(id []byte) bool {
		tagged = true
		if string(id) != h.TID {
			wrong = id
			return false
		}
		return true
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.Frames++
	if h.TID == "" {
		m.st.Untraced++
	}
	if tagged {
		m.st.Tagged++
	}
	if wrong != nil {
		m.st.Misattributed = append(m.st.Misattributed,
			fmt.Sprintf("frame to %s with tid %q carries %s: %q", h.Dst, h.TID, wrong, clip(p)))
	}
	if proto == ProtoHTTP && bytes.Contains(bytes.ToLower(p), []byte("\nretrace-")) {
		m.st.Leaks = append(m.st.Leaks, clip(p))
	}
}

func clip(p []byte) string {
	if len(p) > 200 {
		return string(p[:200]) + "…"
	}
	return string(p)
}

// answer consumes the complete requests at the start of buf and returns
// the rest and the replies.
func answer(proto Proto, buf []byte) (rest, out []byte, err error) {
	switch proto {
	case ProtoLine:
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				return buf, out, nil
			}
			out = append(out, LineReply(string(buf[:i+1]))...)
			buf = buf[i+1:]
		}
	case ProtoRESP:
		for {
			args, n, err := parseRESP(buf)
			if err != nil || n == 0 {
				return buf, out, err
			}
			out = append(out, respReply(args)...)
			buf = buf[n:]
		}
	case ProtoHTTP:
		for {
			i := bytes.Index(buf, []byte("\r\n\r\n"))
			if i < 0 {
				return buf, out, nil
			}
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf[:i+4])))
			if err != nil {
				return buf, out, fmt.Errorf("bad HTTP request %q: %w", clip(buf), err)
			}
			if req.ContentLength > 0 {
				return buf, out, fmt.Errorf("the test mock answers requests without a body only")
			}
			body, _ := json.Marshal(EchoReply{Path: req.URL.Path, Headers: req.Header})
			out = fmt.Appendf(out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			buf = buf[i+4:]
		}
	}
	return buf, out, fmt.Errorf("unknown protocol %d", proto)
}

// parseRESP decodes one command at the start of b (wire/redis); n is 0
// when b holds only part of it.
func parseRESP(b []byte) (args []string, n int, err error) {
	raw, n, err := redis.ParseCommand(b, len(b)+1)
	if err != nil || n == 0 {
		return nil, 0, err
	}
	for _, a := range raw {
		args = append(args, string(a))
	}
	return args, n, nil
}

func respReply(args []string) string {
	if len(args) == 0 {
		return "-ERR empty command\r\n"
	}
	switch strings.ToUpper(args[0]) {
	case "HELLO":
		return "-ERR unknown command 'HELLO'\r\n"
	case "PING":
		return "+PONG\r\n"
	case "GET":
		if len(args) == 2 {
			v := strings.TrimPrefix(args[1], "k:")
			return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
		}
		return "-ERR wrong number of arguments\r\n"
	}
	return "+OK\r\n"
}
