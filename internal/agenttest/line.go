package agenttest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// The line protocol: the client sends "PING <word>\n", the server answers
// "PONG <word>\n".

// LineServer is a real line-protocol server on loopback.
type LineServer struct {
	Addr string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	cs   map[net.Conn]bool
}

// StartLineServer starts a line server on 127.0.0.1 (addr "" picks a port).
func StartLineServer(addr string) (*LineServer, error) { return StartLineServerTLS(addr, nil) }

// StartLineServerTLS starts a line server that speaks TLS with cfg (nil:
// plain TCP).
func StartLineServerTLS(addr string, cfg *tls.Config) (*LineServer, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	s := &LineServer{Addr: ln.Addr().String(), ln: ln, cs: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// NewLineServer starts a line server closed at the end of the test.
func NewLineServer(t testing.TB) *LineServer {
	t.Helper()
	s, err := StartLineServer("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *LineServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.cs[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *LineServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.cs, c)
		s.mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := c.Write([]byte(LineReply(line))); err != nil {
			return
		}
	}
}

// LineReply is the server's answer to one request line.
func LineReply(line string) string {
	w, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "PING ")
	if !ok {
		return "ERR unknown command\n"
	}
	return "PONG " + w + "\n"
}

// Close stops the server and waits for its goroutines.
func (s *LineServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.cs {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// LinePool is a client of the line protocol that keeps idle connections
// for reuse, like a database driver's pool: a call writes on the caller's
// goroutine.
type LinePool struct {
	Addr string
	// TLS, when set, makes the pool's connections TLS clients with it.
	TLS  *tls.Config
	mu   sync.Mutex
	idle []*lineConn
}

type lineConn struct {
	c  net.Conn
	br *bufio.Reader
}

// Ping sends "PING word" and returns the answer's word.
func (p *LinePool) Ping(word string) (string, error) {
	lc, err := p.get()
	if err != nil {
		return "", err
	}
	if _, err := lc.c.Write([]byte("PING " + word + "\n")); err != nil {
		lc.c.Close()
		return "", err
	}
	line, err := lc.br.ReadString('\n')
	if err != nil {
		lc.c.Close()
		return "", err
	}
	p.put(lc)
	got, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "PONG ")
	if !ok {
		return "", fmt.Errorf("line server answered %q", line)
	}
	return got, nil
}

func (p *LinePool) get() (*lineConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		lc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return lc, nil
	}
	p.mu.Unlock()
	if p.Addr == "" {
		return nil, errors.New("line pool has no address")
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		return nil, err
	}
	if p.TLS != nil {
		c = tls.Client(c, p.TLS)
	}
	return &lineConn{c: c, br: bufio.NewReader(c)}, nil
}

func (p *LinePool) put(lc *lineConn) {
	p.mu.Lock()
	p.idle = append(p.idle, lc)
	p.mu.Unlock()
}

// Close closes the idle connections.
func (p *LinePool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, lc := range p.idle {
		lc.c.Close()
	}
	p.idle = nil
}
