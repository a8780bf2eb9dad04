package postgres

import (
	"bytes"
	"encoding/binary"
	"sync"
	"time"
)

// Cancellation. A client cancels a running query by opening another
// connection and sending a CancelRequest with the backend key (process id
// and secret) the server gave the first connection in BackendKeyData; the
// server then answers the query with query_canceled (SQLSTATE 57014) and
// closes the cancel connection without a word. In replay, a recorded
// answer that is query_canceled is held (wire.Canceller) until a
// CancelRequest with the live connection's backend key reaches the mock
// server, as the real server answered only then.
//
// The waiting connections are known process-wide, by the process id the
// mock server gave them (1<<20 + Env.ConnID: the mock server numbers its
// connections process-wide) and checked by their secret: a cancel may
// reach another connection, or be resolved to another recorded
// destination, than the query it cancels. A cancel that arrives before
// the mock server got to the query it cancels (a busy mock) is kept for
// earlyCancel and releases that query's answer at once: only an answer
// recorded as cancelled waits, so it can release nothing else.
var cancels = struct {
	sync.Mutex
	m map[uint32]*cancelWait
}{m: map[uint32]*cancelWait{}}

type cancelWait struct {
	secret []byte
	ch     chan struct{}
	early  time.Time // a cancel that found no answer waiting: when it came
}

// earlyCancel is how long a cancel that found no answer waiting is kept.
const earlyCancel = 10 * time.Second

// backendKey is the key the mock server gives connection connID.
func backendKey(connID uint32) (pid uint32, secret []byte) {
	return 1<<20 + connID, binary.BigEndian.AppendUint32(nil, 0x5eed0000^connID)
}

// awaitCancel registers the connection of pid as waiting for a cancel.
func awaitCancel(pid uint32, secret []byte) (<-chan struct{}, func()) {
	cancels.Lock()
	defer cancels.Unlock()
	if w := cancels.m[pid]; w != nil && !w.early.IsZero() && bytes.Equal(w.secret, secret) {
		delete(cancels.m, pid)
		if time.Since(w.early) < earlyCancel {
			return w.ch, func() {} // cancelled already
		}
	}
	w := &cancelWait{secret: secret, ch: make(chan struct{})}
	cancels.m[pid] = w
	return w.ch, func() {
		cancels.Lock()
		if cancels.m[pid] == w {
			delete(cancels.m, pid)
		}
		cancels.Unlock()
	}
}

// cancel releases the answer that waits under the backend key in body, a
// CancelRequest's (process id, secret), or keeps the cancel for the
// answer of that key to come; it reports whether an answer was waiting.
func cancel(body []byte) bool {
	if len(body) < 8 {
		return false
	}
	pid := binary.BigEndian.Uint32(body)
	secret := body[4:]
	cancels.Lock()
	defer cancels.Unlock()
	if w := cancels.m[pid]; w != nil && w.early.IsZero() {
		if !bytes.Equal(w.secret, secret) {
			return false // a wrong secret cancels nothing, as a server's
		}
		delete(cancels.m, pid)
		close(w.ch)
		return true
	}
	now := time.Now()
	if len(cancels.m) >= 64 {
		for k, w := range cancels.m {
			if !w.early.IsZero() && now.Sub(w.early) >= earlyCancel {
				delete(cancels.m, k)
			}
		}
	}
	w := &cancelWait{secret: append([]byte(nil), secret...), ch: make(chan struct{}), early: now}
	close(w.ch)
	cancels.m[pid] = w
	return false
}

// errorCode returns the SQLSTATE field ('C') of an ErrorResponse's body.
func errorCode(body []byte) string {
	for len(body) > 0 && body[0] != 0 {
		f := body[0]
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return ""
		}
		if f == 'C' {
			return string(body[1 : 1+end])
		}
		body = body[2+end:]
	}
	return ""
}
