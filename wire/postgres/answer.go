package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/retrace-dev/retrace/wire"
)

// answerer is the mock server's state for one live PostgreSQL connection
// (wire.Answerer). It answers the start-up itself — TLS ('S') to an
// SSLRequest as the recorded server did (book.sslAnswer; the agent then
// completes the client's handshake without TLS), no GSSAPI encryption ('N'),
// AuthenticationOk whatever the client's credentials, the recorded
// server's ParameterStatus, a BackendKeyData of its own, ReadyForQuery.
// Every other unit is matched against the trace's recording by its SQL,
// never by the names it uses (they are this connection's own); a unit of
// nothing but prepares that the trace's recording lacks is answered by
// the book from any recording (Fallback).
type answerer struct {
	env     wire.Env
	typed   bool // the StartupMessage has been answered
	tx      byte // transaction status of the last ReadyForQuery sent
	skip    bool // an error was answered before a Sync: messages up to it get no answer
	names   *names
	scratch []Message // the messages of the unit Next returned last; their bodies alias its buffer
	// prepared is the book's answer to the unit of prepares Next returned
	// last, when every statement in it is one a recording described
	prepared []byte
	// canceled: the answer Reply returned last is query_canceled, which
	// waits for the client's CancelRequest (cancel.go) from byte
	// canceledAt on
	canceled   bool
	canceledAt int
}

var (
	_ wire.Answerer  = (*answerer)(nil)
	_ wire.Canceller = (*answerer)(nil)
)

func newAnswerer(env wire.Env) *answerer {
	if env.Book == nil {
		env.Book = newBook()
	}
	return &answerer{env: env, tx: 'I', names: newNames(nil)}
}

func (a *answerer) Greeting() []byte { return nil }

func (a *answerer) Next(buf []byte) (wire.Request, int, []byte, error) {
	ms := a.scratch[:0]
	off := 0
	for {
		m, n, err := Next(buf[off:], true, !a.typed, a.env.MaxMessage)
		if err != nil {
			return wire.Request{}, 0, nil, fmt.Errorf("PostgreSQL message at byte %d of the request: %w", off, err)
		}
		if n == 0 {
			if a.env.MaxMessage > 0 && len(buf) > a.env.MaxMessage {
				return wire.Request{}, 0, nil, fmt.Errorf("%w: PostgreSQL request of more than %d bytes", wire.ErrTooLong, a.env.MaxMessage)
			}
			a.scratch = ms
			return wire.Request{}, 0, nil, nil
		}
		off += n
		if m.IsStartup() {
			a.typed = true
		}
		if a.skip && m.Type != Sync {
			continue // after an error the server ignores everything up to Sync
		}
		ms = append(ms, m)
		if endsUnit(m.Type) {
			break
		}
	}
	a.scratch = ms
	if a.skip {
		a.skip = false
		return wire.Request{Raw: buf[:off], Op: "SYNC", Canon: buf[:off], Setup: true, Local: true}, off, nil, nil
	}
	r, _ := a.names.request(buf[:off], ms)
	a.prepared = nil
	if r.Prepare {
		// set-up when some recording prepared every statement: answered
		// per connection, whatever connection prepared them when
		// recording; otherwise matched in the trace, or missing
		if resp, _, ok := a.env.Book.Fallback(&r); ok {
			r.Setup, a.prepared = true, resp
		}
	}
	return r, off, nil, nil
}

// Reply returns the recorded answer as it is (answers name no statement
// or portal), noting the transaction status it leaves; the answer to a
// unit of prepares or to session settings (from any recording) gets the
// connection's own transaction status instead of the recorded one.
func (a *answerer) Reply(r *wire.Request, resp []byte) []byte {
	a.canceled = false
	if !r.Prepare && !a.sessionSet(r) {
		a.note(resp)
		return resp
	}
	out := append([]byte(nil), resp...)
	failed := false
	off := 0
	Messages(resp, false, false, func(m Message) bool {
		n := 5 + len(m.Body)
		switch {
		case m.Type == ErrorResponse:
			failed = true
		case m.Type == ReadyForQuery && n == 6:
			if failed && a.tx == 'T' {
				a.tx = 'E'
			}
			out[off+5] = a.tx
		}
		off += n
		return true
	})
	if ms := a.scratch; failed && len(ms) > 0 && ms[len(ms)-1].Type == Flush {
		a.skip = true // the unit ended with Flush: the next Sync ends the error
	}
	return out
}

// sessionSet reports whether r, the unit Next returned last, is a simple
// query of session settings (IsSessionSet).
func (a *answerer) sessionSet(r *wire.Request) bool {
	return r.Setup && !r.Local && len(a.scratch) == 1 && a.scratch[0].Type == Query
}

func (a *answerer) note(resp []byte) {
	off := 0
	Messages(resp, false, false, func(m Message) bool {
		switch {
		case m.Type == ReadyForQuery && len(m.Body) == 1:
			a.tx = m.Body[0]
		case m.Type == ErrorResponse && !a.canceled && errorCode(m.Body) == "57014":
			a.canceled, a.canceledAt = true, off
		}
		off += 5 + len(m.Body)
		return true
	})
}

// AwaitCancel: a recorded query_canceled answer waits for a CancelRequest
// with this connection's backend key (cancel.go); what precedes the error
// (BindComplete, RowDescription, rows) goes at once, as the server sent
// it while the query ran.
func (a *answerer) AwaitCancel() (<-chan struct{}, int, func(), bool) {
	if !a.canceled {
		return nil, 0, nil, false
	}
	a.canceled = false
	ch, done := awaitCancel(backendKey(a.env.ConnID))
	return ch, a.canceledAt, done, true
}

// Synth answers the start-up (with the recorded server's parameters, from
// the book), a ping, and the Sync that ends an error's skipped messages.
func (a *answerer) Synth(r *wire.Request) []byte {
	ms := a.scratch
	if len(ms) == 0 {
		return nil
	}
	switch first := ms[0]; {
	case r.Prepare:
		return a.Reply(r, a.prepared)
	case r.Op == "SYNC":
		return a.ready(nil)
	case first.Type == 0 && first.Code == SSLRequestCode:
		// as the recorded server answered (the agent in replay mode
		// completes the client's TLS handshake without TLS and the
		// connection goes on in plaintext); 'S' when no recording shows
		// one: a client asks because it wants TLS (sslmode=require, lib/pq's
		// default, fails on 'N'; prefer, pgx's default, takes either)
		if ans, _, ok := a.env.Book.Fallback(&wire.Request{Op: "SSL"}); ok && len(ans) == 1 {
			return ans
		}
		return []byte{'S'}
	case first.Type == 0 && first.Code == GSSENCRequestCode:
		return []byte{'N'} // no GSSAPI: the client goes on in plaintext or tries TLS
	case first.Type == 0 && first.Code == CancelRequestCode:
		cancel(first.Body) // no answer: the server closes the connection
		return nil
	case first.Type == Terminate:
		return nil
	case first.IsStartup():
		return a.startup()
	case first.Type == Password:
		// never asked for: the start-up was answered AuthenticationOk
		return a.errorThenReady("08P01", "retrace: unexpected password message")
	case a.sessionSet(r):
		// no recording of the destination sent these settings: whether
		// the server takes them is not known
		return a.errorThenReady("XX000", "retrace: no recording of this destination answers the session settings "+clip(r.Key))
	case first.Type == Query:
		return a.ready(encode(nil, &pgproto3.EmptyQueryResponse{}))
	}
	return nil
}

// startup returns the answer to a StartupMessage.
func (a *answerer) startup() []byte {
	out := encode(nil, &pgproto3.AuthenticationOk{})
	if params, _, ok := a.env.Book.Fallback(&wire.Request{Op: "STARTUP"}); ok {
		out = append(out, params...)
	} else {
		for _, p := range defaultParams {
			out = append(out, p...)
		}
	}
	pid, secret := backendKey(a.env.ConnID)
	out = encode(out, &pgproto3.BackendKeyData{ProcessID: pid, SecretKey: secret})
	a.tx = 'I'
	return encode(out, &pgproto3.ReadyForQuery{TxStatus: 'I'})
}

// defaultParams are reported by a destination no recording saw start:
// what pgx and lib/pq need of a PostgreSQL 15 server.
var defaultParams = func() [][]byte {
	var out [][]byte
	for _, kv := range [][2]string{{"server_version", "15.0 (retrace mock)"}, {"server_encoding", "UTF8"},
		{"client_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"},
		{"standard_conforming_strings", "on"}, {"TimeZone", "UTC"}, {"IntervalStyle", "postgres"}} {
		out = append(out, encode(nil, &pgproto3.ParameterStatus{Name: kv[0], Value: kv[1]}))
	}
	return out
}()

func (a *answerer) ready(out []byte) []byte {
	return encode(out, &pgproto3.ReadyForQuery{TxStatus: a.tx})
}

// Missing answers with an ErrorResponse, and a ReadyForQuery when the
// unit asked for one; after a Flush, the messages up to the next Sync are
// skipped as a server does after an error.
func (a *answerer) Missing(r *wire.Request, reason string) []byte {
	ms := a.scratch
	if r.NoReply || len(ms) == 0 {
		return nil
	}
	const sqlstate = "XX000" // internal_error: the client did nothing wrong
	out := errorResponse(sqlstate, "retrace: "+reason)
	switch ms[len(ms)-1].Type {
	case Flush:
		a.skip = true
		return out
	case CopyData:
		return out
	}
	if a.tx == 'T' {
		a.tx = 'E' // a failed transaction block, as after any error in one
	}
	return a.ready(out)
}

func (a *answerer) errorThenReady(code, msg string) []byte {
	return a.ready(errorResponse(code, msg))
}

// AnswerLen: PostgreSQL requests depend on the connection's state (its
// statements, its transaction), so they are never proxied one by one.
func (a *answerer) AnswerLen(*wire.Request, []byte) (int, error) {
	return 0, errors.New("postgres: requests cannot be proxied one by one (pass the destination through instead)")
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

func errorResponse(code, msg string) []byte {
	return encode(nil, &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: msg})
}

func hasError(ans []byte) bool {
	found := false
	Messages(ans, false, false, func(m Message) bool {
		found = m.Type == ErrorResponse
		return !found
	})
	return found
}

type encoder interface {
	Encode(dst []byte) ([]byte, error)
}

// encode appends m's encoding; messages the mock server builds always
// encode.
func encode(dst []byte, m encoder) []byte {
	out, err := m.Encode(dst)
	if err != nil {
		return dst
	}
	return out
}
