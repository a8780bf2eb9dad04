// Package wiretest is the conformance kit every wire protocol package
// passes (docs/wire.md, "Adding a protocol"):
//
//   - Conform: on sample exchanges of the protocol, both framers find the
//     same messages however the bytes are split or coalesced (at every
//     byte); a fresh connection's set-up is classified as set-up by the
//     capture Tap and by the mock server's Answerer, which answers it; the
//     features of a live request equal those of its recording (so
//     matching compares like with like); the missing-mock error is one
//     whole message of the protocol; every request decodes.
//   - FuzzFramers: native fuzzing of both framers: no panic, lengths in
//     range, the same messages in any split.
//   - RecordReplay: many concurrent traces on a pool of connections to a
//     real server, recorded under the agent, then replayed through the
//     agent against the mock server with the server stopped: every
//     answer as recorded, nothing missing, no hang.
//
// It is a test helper: import it from _test files only.
package wiretest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/retrace-dev/retrace/wire"
)

// Exchange is one request of a sample conversation and its answer, as
// the real server sent it.
type Exchange struct {
	// Request holds whole client messages; nil for bytes the server sends
	// first (a greeting).
	Request []byte
	// Response holds the server's whole answer (nil for none).
	Response []byte
	// Setup marks connection set-up (DESIGN.md 3.4).
	Setup bool
}

// Sample is a conversation on one fresh connection.
type Sample struct {
	Name      string
	Exchanges []Exchange
	// NoMissingError: the protocol has no error message for a missing
	// mock (raw): the mock server closes the connection instead.
	NoMissingError bool
	// NoDecode: the requests are not text the protocol can show (raw
	// binary).
	NoDecode bool
	// Unframed: the protocol has no message boundaries of its own (raw:
	// what arrived is the message), so splits are not compared.
	Unframed bool
}

// limit is the framers' message limit in the kit.
const limit = 1 << 20

// frames returns the lengths of the messages a framer finds in b, fed as
// the pieces cut at cuts, and the bytes left unframed.
func frames(f wire.Framer, b []byte, cuts ...int) ([]int, int, error) {
	var out []int
	var buf []byte
	prev := 0
	for _, at := range append(cuts, len(b)) {
		buf = append(buf, b[prev:at]...)
		prev = at
		for len(buf) > 0 {
			n, err := f.Next(buf)
			if err != nil {
				return out, len(buf), err
			}
			if n < 0 || n > len(buf) {
				return out, len(buf), fmt.Errorf("framer returned %d for %d bytes", n, len(buf))
			}
			if n == 0 {
				break
			}
			out = append(out, n)
			buf = buf[n:]
		}
	}
	return out, len(buf), nil
}

// streams returns what each side sent in the sample, and the client's
// whole messages (what a server framer is told of).
func streams(s Sample) (client, server []byte, reqs [][]byte) {
	for _, ex := range s.Exchanges {
		client = append(client, ex.Request...)
		server = append(server, ex.Response...)
		if ex.Request != nil {
			reqs = append(reqs, ex.Request)
		}
	}
	return client, server, reqs
}

func newFramer(p wire.Protocol, side wire.Side, reqs [][]byte) wire.Framer {
	f := p.NewFramer(side, limit)
	if side == wire.Server {
		for _, r := range reqs {
			f.Request(r)
		}
	}
	return f
}

// Conform runs the offline checks of the kit on every sample.
func Conform(t *testing.T, p wire.Protocol, samples ...Sample) {
	t.Helper()
	for _, s := range samples {
		t.Run(s.Name, func(t *testing.T) {
			t.Run("split and coalesced", func(t *testing.T) { checkFraming(t, p, s) })
			t.Run("set-up on a fresh connection", func(t *testing.T) { checkSetup(t, p, s) })
			t.Run("recorded like live", func(t *testing.T) { checkFeatures(t, p, s) })
			t.Run("missing mock", func(t *testing.T) { checkMissing(t, p, s) })
			if !s.NoDecode {
				t.Run("decode", func(t *testing.T) { checkDecode(t, p, s) })
			}
		})
	}
}

// checkFraming: every exchange's bytes are whole messages, and the stream
// of each side cut at any byte (and at any two) frames the same.
func checkFraming(t *testing.T, p wire.Protocol, s Sample) {
	client, server, reqs := streams(s)
	for _, side := range []wire.Side{wire.Client, wire.Server} {
		b := client
		if side == wire.Server {
			b = server
		}
		want, left, err := frames(newFramer(p, side, reqs), b)
		if err != nil || left != 0 {
			t.Fatalf("%s stream coalesced: %v, %d bytes left unframed of %q", side, err, left, b)
		}
		if s.Unframed {
			continue
		}
		// each exchange's bytes end on a message boundary
		ends := map[int]bool{0: true}
		for pos := range want {
			ends[sum(want[:pos+1])] = true
		}
		off := 0
		for i, ex := range s.Exchanges {
			part := ex.Request
			if side == wire.Server {
				part = ex.Response
			}
			off += len(part)
			if !ends[off] {
				t.Errorf("%s bytes of exchange %d do not end on a message boundary (at %d; messages %v)", side, i, off, want)
			}
		}
		for cut := 1; cut < len(b); cut++ {
			got, left, err := frames(newFramer(p, side, reqs), b, cut)
			if err != nil || left != 0 || !equal(got, want) {
				t.Fatalf("%s stream cut at %d: messages %v (%v, %d left), want %v", side, cut, got, err, left, want)
			}
		}
		if len(b) <= 512 {
			for a := 1; a < len(b); a++ {
				for c := a + 1; c < len(b); c++ {
					got, left, err := frames(newFramer(p, side, reqs), b, a, c)
					if err != nil || left != 0 || !equal(got, want) {
						t.Fatalf("%s stream cut at %d and %d: messages %v (%v, %d left), want %v", side, a, c, got, err, left, want)
					}
				}
			}
		}
	}
}

func sum(ns []int) int {
	s := 0
	for _, n := range ns {
		s += n
	}
	return s
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// book learns the sample as a recording of the destination.
func book(p wire.Protocol, s Sample) wire.Book {
	b := p.NewBook()
	for i, ex := range s.Exchanges {
		b.Learn(wire.Call{Request: ex.Request, Response: ex.Response, Setup: ex.Setup, Conn: 1, Seq: i})
	}
	return b
}

// checkSetup: on a fresh connection, capture's Tap and the mock server's
// Answerer both take the sample's set-up for set-up, and the Answerer
// answers it (from the recording or by itself).
func checkSetup(t *testing.T, p wire.Protocol, s Sample) {
	tap := p.NewTap()
	a := p.NewAnswerer(wire.Env{Book: book(p, s), MaxMessage: limit, TraceID: func() string { return "trace" }, ConnID: 7})
	g := a.Greeting()
	first := len(s.Exchanges) > 0 && s.Exchanges[0].Request == nil
	if first != (g != nil) {
		t.Fatalf("greeting %q; the sample's server speaks first: %v", g, first)
	}
	if g != nil {
		if got, left, err := frames(p.NewFramer(wire.Server, limit), g); err != nil || left != 0 || len(got) == 0 {
			t.Fatalf("greeting %q is not whole messages: %v", g, err)
		}
	}
	for i, ex := range s.Exchanges {
		if ex.Request == nil {
			tap.Read(ex.Response)
			continue
		}
		f := tap.Write(ex.Request, "trace", true)
		if f.Setup != ex.Setup {
			t.Errorf("exchange %d %q: capture files set-up %v, want %v", i, clip(ex.Request), f.Setup, ex.Setup)
		}
		if f.Trace != "trace" {
			t.Errorf("exchange %d: capture charges trace %q, want the writer's", i, f.Trace)
		}
		tap.Read(ex.Response)
		r, n, _, err := a.Next(ex.Request)
		if err != nil || n != len(ex.Request) {
			t.Fatalf("exchange %d %q: the answerer took %d bytes (%v), want all %d", i, clip(ex.Request), n, err, len(ex.Request))
		}
		if ex.Setup && !r.Setup && !r.Local {
			t.Errorf("exchange %d %q: the answerer does not take it for set-up", i, clip(ex.Request))
		}
		if ex.Setup {
			var out []byte
			if r.Local {
				out = a.Synth(&r)
			} else {
				out = a.Reply(&r, ex.Response)
			}
			if len(out) == 0 && !r.NoReply {
				t.Errorf("exchange %d %q: set-up not answered", i, clip(ex.Request))
			}
		} else if !r.NoReply {
			a.Reply(&r, ex.Response)
		}
	}
}

// checkFeatures: a recorded request's units have the features the live
// request has.
func checkFeatures(t *testing.T, p wire.Protocol, s Sample) {
	b := book(p, s)
	sess := p.NewSession(b)
	a := p.NewAnswerer(wire.Env{Book: b, MaxMessage: limit, TraceID: func() string { return "trace" }, ConnID: 1})
	for i, ex := range s.Exchanges {
		units := sess.Units(wire.Call{Request: ex.Request, Response: ex.Response, Setup: ex.Setup, Conn: 1, Seq: i})
		if ex.Request == nil {
			continue
		}
		if len(units) == 0 {
			t.Fatalf("exchange %d %q: no unit", i, clip(ex.Request))
		}
		live, _, _, err := a.Next(ex.Request)
		if err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
		if live.Local {
			a.Synth(&live) // answered by the protocol itself, never matched
			continue
		}
		rec := units[len(units)-1].Req
		if rec.Op != live.Op || rec.Key != live.Key || rec.Setup != live.Setup && !live.Local {
			t.Errorf("exchange %d %q: recorded op %q key %q setup %v, live op %q key %q setup %v",
				i, clip(ex.Request), rec.Op, rec.Key, rec.Setup, live.Op, live.Key, live.Setup)
		}
		if !live.NoReply && !live.Local {
			a.Reply(&live, ex.Response)
		}
	}
}

// checkMissing: the error for a missing mock is whole server messages.
func checkMissing(t *testing.T, p wire.Protocol, s Sample) {
	a := p.NewAnswerer(wire.Env{Book: p.NewBook(), MaxMessage: limit, TraceID: func() string { return "trace" }, ConnID: 1})
	for i, ex := range s.Exchanges {
		if ex.Request == nil {
			continue
		}
		r, _, _, err := a.Next(ex.Request)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Setup || r.NoReply || r.Local {
			if r.Local {
				a.Synth(&r)
			}
			continue
		}
		out := a.Missing(&r, "no recorded call")
		if out == nil {
			if !s.NoMissingError {
				t.Errorf("exchange %d %q: no missing-mock error", i, clip(ex.Request))
			}
			continue
		}
		f := p.NewFramer(wire.Server, limit)
		f.Request(ex.Request)
		if got, left, err := frames(f, out); err != nil || left != 0 || len(got) == 0 {
			t.Errorf("exchange %d: missing-mock error %q is not whole messages (%v, %d left)", i, out, err, left)
		}
		if !bytes.Contains(out, []byte("no recorded call")) {
			t.Errorf("exchange %d: missing-mock error %q does not say why", i, out)
		}
	}
}

func checkDecode(t *testing.T, p wire.Protocol, s Sample) {
	for i, ex := range s.Exchanges {
		if ex.Request == nil {
			continue
		}
		d, ok := p.Decode(wire.Client, ex.Request)
		if !ok || d.Text == "" || len(d.Fields) == 0 {
			t.Errorf("exchange %d %q: decoded %+v, %v", i, clip(ex.Request), d, ok)
		}
	}
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}
