package agenttest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSServer is a tiny authoritative DNS server over UDP on loopback: it
// answers A queries for the names it was given and NXDOMAIN for any other
// name, so a test can make production-like host names resolve (while
// recording) and then stop resolving (while replaying).
type DNSServer struct {
	Addr    string
	pc      net.PacketConn
	names   map[string]netip.Addr // lower-case FQDN with the final dot
	queries atomic.Int64
	wg      sync.WaitGroup
	once    sync.Once
}

// NewDNSServer starts a DNS server answering names (without or with the
// final dot) with their IPv4 addresses; it is stopped at the end of the
// test.
func NewDNSServer(t testing.TB, names map[string]string) *DNSServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &DNSServer{Addr: pc.LocalAddr().String(), pc: pc, names: map[string]netip.Addr{}}
	for n, a := range names {
		s.names[strings.ToLower(strings.TrimSuffix(n, "."))+"."] = netip.MustParseAddr(a)
	}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.Stop)
	return s
}

// Queries returns how many queries the server received.
func (s *DNSServer) Queries() int64 { return s.queries.Load() }

// Stop stops answering; later queries go unanswered (a lookup then fails
// once its dial to the server is refused). Safe to call twice.
func (s *DNSServer) Stop() {
	s.once.Do(func() {
		s.pc.Close()
		s.wg.Wait()
	})
}

func (s *DNSServer) serve() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		s.queries.Add(1)
		if out, ok := s.answer(buf[:n]); ok {
			s.pc.WriteTo(out, from)
		}
	}
}

func (s *DNSServer) answer(q []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, false
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil, false
	}
	qn := qs[0]
	addr, known := s.names[strings.ToLower(qn.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(qn) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	if known && qn.Type == dnsmessage.TypeA {
		rr := dnsmessage.ResourceHeader{Name: qn.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5}
		if b.AResource(rr, dnsmessage.AResource{A: addr.As4()}) != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}

// UseDNS points net.DefaultResolver at the server (Go's own resolver,
// every query sent to it) until the end of the test. The resolver still
// reads /etc/hosts first; names the test uses must not be there.
func UseDNS(t testing.TB, s *DNSServer) {
	t.Helper()
	r := net.DefaultResolver
	prefer, dial := r.PreferGo, r.Dial
	r.PreferGo = true
	r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.Addr)
	}
	t.Cleanup(func() { r.PreferGo, r.Dial = prefer, dial })
}
