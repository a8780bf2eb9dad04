package mocktest_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/trace"
)

// TestDialerFramesEveryWrite checks the frames a Dialer sends: a preamble,
// then one frame per write carrying the trace bound to the writer.
func TestDialerFramesEveryWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var got []byte
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		got, _ = io.ReadAll(c)
		c.Close()
	})
	d := &mocktest.Dialer{Mock: ln.Addr().String()}
	c, err := d.DialContext(context.Background(), "tcp", "10.0.0.7:6379")
	if err != nil {
		t.Fatal(err)
	}
	undo := mocktest.Bind("t-1")
	c.Write([]byte("one"))
	undo()
	c.Write([]byte("two"))
	c.Close()
	wg.Wait()
	want := trace.AppendFrameHeader(nil, "", "10.0.0.7:6379", 0)
	want = trace.AppendFrame(want, "t-1", "10.0.0.7:6379", []byte("one"))
	want = trace.AppendFrame(want, "", "10.0.0.7:6379", []byte("two"))
	if !bytes.Equal(got, want) {
		t.Fatalf("stream\n%q\nwant\n%q", got, want)
	}
}

// TestRecorderPairsWritesAndReads records a request/response exchange over a
// real TCP echo server.
func TestRecorderPairsWritesAndReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			c.Write(bytes.ToUpper(buf[:n]))
		}
	})
	rec := mocktest.NewRecorder()
	c, err := rec.Dialer("raw", "")(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for _, tid := range []string{"a", "b"} {
		undo := mocktest.Bind(tid)
		c.Write([]byte("hi " + tid))
		io.ReadFull(c, buf[:4])
		undo()
	}
	c.Close()
	ss := rec.Sessions()
	if len(ss) != 2 || ss[0].ID != "a" || ss[1].ID != "b" {
		t.Fatalf("sessions %+v", ss)
	}
	for _, s := range ss {
		if len(s.Calls) != 1 || string(s.Calls[0].Request) != "hi "+s.ID || string(s.Calls[0].Response) != "HI "+string(bytes.ToUpper([]byte(s.ID))) {
			t.Fatalf("session %s calls %+v", s.ID, s.Calls)
		}
	}
}
