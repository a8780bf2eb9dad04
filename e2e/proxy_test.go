package e2e

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// tcpProxy stands between the service under test and one real downstream,
// so a test can take the downstream away (Stop: the port refuses
// connections, open connections are cut) and bring it back on the same
// address (Start) while the real server keeps running for other tests.
type tcpProxy struct {
	t        testing.TB
	addr     string // fixed after the first Start
	target   string
	accepted atomic.Int64

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newProxy(t testing.TB, target string) *tcpProxy {
	p := &tcpProxy{t: t, addr: "127.0.0.1:0", target: target, conns: map[net.Conn]bool{}}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start listens (again) on the proxy's address.
func (p *tcpProxy) Start() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy to %s: %v", p.target, err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Add(1)
	go p.accept(ln)
}

func (p *tcpProxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	// None of the proxied protocols half-closes: the end of either
	// direction ends the connection.
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}

// Stop closes the listener and every proxied connection and waits.
func (p *tcpProxy) Stop() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Addr is the proxy's host:port.
func (p *tcpProxy) Addr() string { return p.addr }

// Accepted counts the connections the proxy accepted so far.
func (p *tcpProxy) Accepted() int64 { return p.accepted.Load() }
