package hook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/trace"
)

// seenRequest is what the byte-reading server reports for one request.
type seenRequest struct {
	Head       string    `json:"head"`
	Body       string    `json:"body"`
	TID        string    `json:"tid"`
	ReplayTime time.Time `json:"replay_time"`
	Now        time.Time `json:"now"`
	ChildNow   time.Time `json:"child_now"` // time.Now in a goroutine the reader started
}

// startByteServer serves HTTP/1.1 requests reading readSize bytes at a time
// (1 makes every byte boundary a split between reads), and answers each
// with the head it read, its body, and the trace bound at that point.
func startByteServer(t *testing.T, readSize int) string {
	addr, _ := startByteServerStop(t, readSize)
	return addr
}

// startByteServerStop is startByteServer with a stop function that closes
// the listener and waits for every connection's goroutine to end (each
// closes its connection when its client does).
func startByteServerStop(t *testing.T, readSize int) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ln.Close()
			wg.Wait()
		})
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		stop()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				serveBytes(c, readSize)
			}()
		}
	}()
	return ln.Addr().String(), stop
}

// serveOne accepts one connection on ln, runs serve on it and closes it.
// The channel it returns is closed once that is done, or Accept failed.
func serveOne(ln net.Listener, serve func(c net.Conn)) <-chan struct{} {
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return served
}

func serveBytes(c net.Conn, readSize int) {
	var data []byte
	buf := make([]byte, readSize)
	fill := func(n int) bool {
		for len(data) < n {
			k, err := c.Read(buf)
			data = append(data, buf[:k]...)
			if err != nil {
				return false
			}
		}
		return true
	}
	for {
		end := -1
		for end < 0 {
			if end = bytes.Index(data, []byte("\r\n\r\n")); end >= 0 {
				break
			}
			if !fill(len(data) + 1) {
				return
			}
		}
		head := string(data[:end+4])
		data = data[end+4:]
		var sr seenRequest
		sr.Head, sr.TID, sr.Now = head, trace.CurrentID(), time.Now()
		child := make(chan time.Time)
		go func() { child <- time.Now() }()
		sr.ChildNow = <-child
		if tr := trace.Current(); tr != nil {
			sr.ReplayTime = tr.ReplayTime
		}
		n := 0
		for _, line := range strings.Split(head, "\r\n") {
			if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length: "); ok {
				n, _ = strconv.Atoi(v)
			}
		}
		if !fill(n) {
			return
		}
		sr.Body, data = string(data[:n]), data[n:]
		body, _ := json.Marshal(sr)
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return
		}
	}
}

// TestInboundStripAndBind: on one keep-alive connection, requests with a
// trace, without, with an invalid id (ignored, stripped, logged once), and
// with a body that merely looks like a header; the server reads 1, 3, 7 or
// 4096 bytes at a time. The application sees exactly the request minus its
// Retrace-* lines, and the request's trace is bound on the reading
// goroutine when its head has been read.
func TestInboundStripAndBind(t *testing.T) {
	sizes := []int{1, 3, 7, 4096}
	addrs := map[int]string{}
	var servers []string
	for _, n := range sizes {
		addrs[n] = startByteServer(t, n)
		servers = append(servers, addrs[n])
	}
	logs := &logBuffer{}
	// The servers are pass-through so the test's own client reaches them.
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: servers, Logger: logs.logger()})
	for _, readSize := range sizes {
		t.Run(fmt.Sprintf("read%d", readSize), func(t *testing.T) {
			addr := addrs[readSize]
			rc, err := agenttest.DialRaw(addr)
			require.NoError(t, err)
			defer rc.Close()
			idA, idB := agenttest.NewID(), agenttest.NewID()
			body := "Retrace-Trace-Id: " + idA + "\r\n"
			cases := []struct {
				name, send, want, tid, body string
				replay                      time.Time
			}{
				{
					name: "traced",
					send: "GET /a HTTP/1.1\r\nHost: x\r\nRetrace-Trace-Id: " + idA + "\r\nX-Mid: 1\r\nRetrace-Replay-Time: 1700000000000000000\r\nretrace-other: y\r\nRetry-After: 5\r\n\r\n",
					want: "GET /a HTTP/1.1\r\nHost: x\r\nX-Mid: 1\r\nRetry-After: 5\r\n\r\n",
					tid:  idA, replay: time.Unix(0, 1700000000000000000),
				},
				{
					name: "untraced",
					send: "GET /b HTTP/1.1\r\nHost: x\r\nRetr: 1\r\n\r\n",
					want: "GET /b HTTP/1.1\r\nHost: x\r\nRetr: 1\r\n\r\n",
				},
				{
					name: "invalid id",
					send: "GET /c HTTP/1.1\r\nRetrace-Trace-Id: bad id!\r\nHost: x\r\n\r\n",
					want: "GET /c HTTP/1.1\r\nHost: x\r\n\r\n",
				},
				{
					name: "body looks like a header",
					send: "POST /d HTTP/1.1\r\nHost: x\r\nRETRACE-TRACE-ID: " + idB + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body,
					want: "POST /d HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n",
					tid:  idB, body: body,
				},
				{
					name: "invalid id again",
					send: "GET /e HTTP/1.1\r\nHost: x\r\nRetrace-Trace-Id: \r\n\r\n",
					want: "GET /e HTTP/1.1\r\nHost: x\r\n\r\n",
				},
			}
			for _, c := range cases {
				// Send in two writes split inside the header block.
				cut := len(c.send) / 2
				require.NoError(t, rc.WriteRaw([]byte(c.send[:cut])))
				require.NoError(t, rc.WriteRaw([]byte(c.send[cut:])))
				code, raw, err := rc.ReadResponse()
				require.NoError(t, err, c.name)
				require.Equal(t, 200, code, c.name)
				var sr seenRequest
				require.NoError(t, json.Unmarshal(raw, &sr), c.name)
				require.Equal(t, c.want, sr.Head, c.name)
				require.Equal(t, c.body, sr.Body, c.name)
				require.Equal(t, c.tid, sr.TID, c.name)
				require.True(t, c.replay.Equal(sr.ReplayTime), "%s: replay time %v", c.name, sr.ReplayTime)
			}
		})
	}
	require.Equal(t, 1, strings.Count(logs.String(), "not a valid trace id"), logs.String())
}

// TestInboundSplitEverywhere sends one traced request cut at every byte
// position into two writes, to a server reading 4096 bytes at a time.
func TestInboundSplitEverywhere(t *testing.T) {
	addr := startByteServer(t, 4096)
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: []string{addr}, Logger: discardLogger()})
	rc, err := agenttest.DialRaw(addr)
	require.NoError(t, err)
	defer rc.Close()
	id := agenttest.NewID()
	send := "GET /s HTTP/1.1\r\nHost: x\r\nRetrace-Trace-Id: " + id + "\r\nRetrace-Replay-Time: 1\r\nAccept: */*\r\n\r\n"
	want := "GET /s HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
	for cut := 1; cut < len(send); cut++ {
		require.NoError(t, rc.WriteRaw([]byte(send[:cut])))
		require.NoError(t, rc.WriteRaw([]byte(send[cut:])))
		_, raw, err := rc.ReadResponse()
		require.NoError(t, err)
		var sr seenRequest
		require.NoError(t, json.Unmarshal(raw, &sr))
		require.Equal(t, want, sr.Head, "cut at %d", cut)
		require.Equal(t, id, sr.TID, "cut at %d", cut)
	}
}

// TestNoGrowth: after many traced requests on many keep-alive connections,
// once the connections are closed the agent tracks no connection and no
// binding is left: memory does not grow with requests served.
func TestNoGrowth(t *testing.T) {
	addr, stop := startByteServerStop(t, 4096)
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: []string{addr}, Logger: discardLogger()})
	boundBefore, before := trace.Bound(), hook.ReadStats()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := agenttest.DialRaw(addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer rc.Close()
			for range 50 {
				id := agenttest.NewID()
				if _, _, err := rc.Get("/g", "Retrace-Trace-Id: "+id); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	stop() // every server connection has seen EOF and been closed
	st := hook.ReadStats()
	require.GreaterOrEqual(t, st.ConnsSeen-before.ConnsSeen, int64(32))
	require.Equal(t, int64(16*50), st.Traced-before.Traced)
	require.Zero(t, st.Conns, "connections still tracked")
	require.Equal(t, boundBefore, trace.Bound(), "bindings left")
}
