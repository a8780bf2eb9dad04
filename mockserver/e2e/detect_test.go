package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

// Text protocols that a detector which guesses takes for HTTP (an
// upper-case word and a space) or for Redis: each is recorded under the
// real agent from a service that calls it on a pool of connections from a
// request's handler, a child goroutine and a grandchild, 32 requests at a
// time; then the downstream is stopped and the requests are replayed
// through the agent against the mock server (wiretest.RecordReplay).
// Before the protocols were detected without guessing, the line protocol
// was recorded as "http", the mock server waited for an HTTP head that
// never came, and every replayed request timed out.

// readRESP reads one RESP simple string, error, integer or bulk string.
func readRESP(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "$") {
		return line, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return line, err
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(br, body); err != nil {
		return "", err
	}
	return line + string(body), nil
}

// textServer answers every line with answer(line), on real TCP.
type textServer struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	cs map[net.Conn]bool
}

func startTextServer(t *testing.T, answer func(line string) string) *textServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &textServer{ln: ln, cs: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.cs[c] = true
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, answer(line)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(s.close)
	return s
}

func (s *textServer) addr() string { return s.ln.Addr().String() }

// close stops the server and ends its connections: the downstream is gone.
// Closing twice is harmless.
func (s *textServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.cs {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// TestRawLineProtocolLikeHTTP: "GET <key> <tag>\n" starts like an HTTP
// request line, and is raw.
func TestRawLineProtocolLikeHTTP(t *testing.T) {
	nonce := trace.NewID()[:8]
	s := startTextServer(t, func(line string) string {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "GET" {
			return "ERR bad request\n"
		}
		return fmt.Sprintf("VALUE %s %s %s\n", f[1], f[2], trace.NewID()[:8])
	})
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: "raw", Dst: s.addr(), Stop: s.close,
		NewClient: func(dst string) wiretest.Client {
			return &wiretest.LineClient{Dst: dst, Read: wiretest.ReadLine,
				Request: func(i, n int) string { return fmt.Sprintf("GET key:%s:%d:%d tag%d\n", nonce, i, n, n) }}
		}})
}

// TestTextProtocolHELO: SMTP/POP3-like commands ("HELO x", "USER x") are
// raw: neither HTTP nor Redis.
func TestTextProtocolHELO(t *testing.T) {
	s := startTextServer(t, func(line string) string {
		verb, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch verb {
		case "HELO":
			return "250 hello " + arg + " " + trace.NewID()[:6] + "\r\n"
		case "USER":
			return "331 user " + arg + " ok " + trace.NewID()[:6] + "\r\n"
		case "PASS":
			return "230 logged in " + trace.NewID()[:6] + "\r\n"
		}
		return "500 what\r\n"
	})
	verbs := []string{"HELO", "USER", "PASS"}
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: "raw", Dst: s.addr(), Stop: s.close,
		NewClient: func(dst string) wiretest.Client {
			return &wiretest.LineClient{Dst: dst, Read: wiretest.ReadLine,
				Request: func(i, n int) string { return fmt.Sprintf("%s client%d\r\n", verbs[n], i) }}
		}})
}

// TestRedisInlineCommands: inline commands ("PING\r\n", "GET k\r\n") to a
// real Redis are Redis.
func TestRedisInlineCommands(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := "retrace-inline-" + trace.NewID()[:8]
	// the values the requests read, set without the agent
	setup := &wiretest.LineClient{Dst: addr, Read: readRESP}
	for i := range 32 {
		for n := 1; n < 3; n++ {
			if _, err := setup.Do(fmt.Sprintf("SET %s:%d:%d v%d-%s\r\n", prefix, i, n, i, trace.NewID()[:6])); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for i := range 32 {
			setup.Do(fmt.Sprintf("DEL %s:%d:1 %s:%d:2\r\n", prefix, i, prefix, i))
		}
		setup.Close()
	})
	fw := wiretest.NewRelay(t, addr)
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: "redis", Dst: fw.Addr(), Stop: fw.Close,
		NewClient: func(dst string) wiretest.Client {
			return &wiretest.LineClient{Dst: dst, Read: readRESP, Request: func(i, n int) string {
				if n == 0 {
					return "PING\r\n"
				}
				return fmt.Sprintf("GET %s:%d:%d\r\n", prefix, i, n)
			}}
		}})
}
