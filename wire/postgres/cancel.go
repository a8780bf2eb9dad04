package postgres

import (
	"bytes"
	"encoding/binary"
	"sync"
)

// Cancellation. A client cancels a running query by opening another
// connection and sending a CancelRequest with the backend key (process id
// and secret) the server gave the first connection in BackendKeyData; the
// server then answers the query with query_canceled (SQLSTATE 57014) and
// closes the cancel connection without a word. In replay, a recorded
// answer that is query_canceled is held (wire.Canceller) until a
// CancelRequest with the live connection's backend key reaches the mock
// server, as the real server answered only then; a cancel of a connection
// with no held answer does nothing, as a cancel of an idle backend does.
//
// The waiting connections are known process-wide, by the process id the
// mock server gave them (1<<20 + Env.ConnID: the mock server numbers its
// connections process-wide) and checked by their secret: a cancel may
// reach another connection, or be resolved to another recorded
// destination, than the query it cancels.
var cancels = struct {
	sync.Mutex
	m map[uint32]*cancelWait
}{m: map[uint32]*cancelWait{}}

type cancelWait struct {
	secret []byte
	ch     chan struct{}
}

// backendKey is the key the mock server gives connection connID.
func backendKey(connID uint32) (pid uint32, secret []byte) {
	return 1<<20 + connID, binary.BigEndian.AppendUint32(nil, 0x5eed0000^connID)
}

// awaitCancel registers the connection of pid as waiting for a cancel.
func awaitCancel(pid uint32, secret []byte) (<-chan struct{}, func()) {
	w := &cancelWait{secret: secret, ch: make(chan struct{})}
	cancels.Lock()
	cancels.m[pid] = w
	cancels.Unlock()
	return w.ch, func() {
		cancels.Lock()
		if cancels.m[pid] == w {
			delete(cancels.m, pid)
		}
		cancels.Unlock()
	}
}

// cancel releases the connection that waits under the backend key in
// body, a CancelRequest's (process id, secret); it reports whether one
// did.
func cancel(body []byte) bool {
	if len(body) < 8 {
		return false
	}
	pid := binary.BigEndian.Uint32(body)
	cancels.Lock()
	defer cancels.Unlock()
	w := cancels.m[pid]
	if w == nil || !bytes.Equal(w.secret, body[4:]) {
		return false
	}
	delete(cancels.m, pid)
	close(w.ch)
	return true
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
