package hook

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/trace"
)

// divergenceTimeout bounds a report of a divergence to the mock server.
const divergenceTimeout = 2 * time.Second

// divergenceReporter sends the divergences of replayed requests'
// randomness to the mock server (trace.RandomDst), on one connection of
// its own, and waits for each to be noted: the runner reads a trace's
// report from the mock server once the response has come, and by then the
// divergences the request made are there.
type divergenceReporter struct {
	addr string // the mock server
	mu   sync.Mutex
	c    net.Conn
	buf  []byte
}

// diverged reports where the randomness of replayed trace tid left its
// recording: to the mock server, for the runner's report, and to the log.
// It runs on the goroutine that drew; a failure is logged once and the
// draw proceeds.
func (e *engine) diverged(tid string, d trace.Divergence) {
	counters.diverged.Add(1)
	e.debugOnce("diverged", "replayed randomness diverged", "trace", tid, "divergence", d.String())
	if e.cfg.Mode != Replay {
		return
	}
	if err := e.div.send(tid, d); err != nil {
		e.reportOnce("divergence-report", "could not report a divergence of replayed randomness to the mock server",
			"trace", tid, "divergence", d.String(), "err", err)
	}
}

func (r *divergenceReporter) send(tid string, d trace.Divergence) error {
	line, err := json.Marshal(d)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	for attempt := 0; ; attempt++ {
		err := r.sendLocked(tid, line)
		if err == nil || attempt == 1 {
			return err
		}
		// the connection may have been closed by the mock (idle): once more on a new one
	}
}

func (r *divergenceReporter) sendLocked(tid string, line []byte) error {
	if r.c == nil {
		c, err := net.DialTimeout("tcp", r.addr, divergenceTimeout)
		if err != nil {
			return err
		}
		r.c = c
		r.buf = trace.AppendFrameHeader(r.buf[:0], "", trace.RandomDst, 0)
	} else {
		r.buf = r.buf[:0]
	}
	r.buf = trace.AppendFrame(r.buf, tid, trace.RandomDst, line)
	r.c.SetDeadline(time.Now().Add(divergenceTimeout))
	var ack [1]byte
	_, err := r.c.Write(r.buf)
	if err == nil {
		_, err = r.c.Read(ack[:])
	}
	if err == nil && ack[0] != '\n' {
		err = fmt.Errorf("mock server answered %q, not a newline", ack[0])
	}
	if err != nil {
		r.c.Close()
		r.c = nil
	}
	return err
}

func (r *divergenceReporter) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
}
