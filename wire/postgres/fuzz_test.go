package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/retrace-dev/retrace/wire"

	"github.com/retrace-dev/retrace/wire/postgres"
)

// FuzzFramers feeds a stream to both framers whole and in two pieces cut
// at any byte: the messages must be the same, and nothing may panic.
func FuzzFramers(f *testing.F) {
	f.Add(stream(), uint16(7))
	f.Add(msg('T', "\x00\x01id\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"), uint16(3))
	f.Add(append(msg('D', "\x00\x01\x00\x00\x00\x0242"), msg('Z', "I")...), uint16(10))
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47}, uint16(4))
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		for _, frontend := range []bool{true, false} {
			whole, werr := frameSplit(b, frontend, len(b))
			parts, perr := frameSplit(b, frontend, int(cut)%(len(b)+1))
			if (werr == nil) != (perr == nil) || !equalMessages(whole, parts) {
				t.Fatalf("frontend %v: whole %v (%v), split at %d %v (%v)", frontend, whole, werr, cut, parts, perr)
			}
			postgres.Detect(b)
			postgres.SetupWrite(b)
		}
	})
}

func frameSplit(b []byte, frontend bool, cut int) ([]framed, error) {
	f := postgres.NewBackendFramer(1 << 20)
	if frontend {
		f = postgres.NewFrontendFramer(1 << 20)
	}
	return frameWith(f, b, []int{cut, len(b) - cut})
}

func FuzzNormalizeSQL(f *testing.F) {
	for _, s := range []string{"select 1", "select 'a''b', $1, $$x$$", "/* */ -- x\n", "E'\\", "$a$"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		norm, _ := postgres.NormalizeSQL(q)
		if again, _ := postgres.NormalizeSQL(norm); again != norm && !containsQuoteOrComment(q) {
			t.Fatalf("not idempotent: %q → %q → %q", q, norm, again)
		}
		postgres.IsPing(q)
		postgres.IsSessionSet(q)
	})
}

func containsQuoteOrComment(q string) bool {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case '\'', '"', '$', '-', '/', 'e', 'E':
			return true
		}
	}
	return false
}

// FuzzExchange runs arbitrary client and server bytes through a
// recording's session (whole, and with the answer cut in two calls), the
// book, an answerer and both decoders: nothing panics, and the units do
// not depend on where the answer was cut.
func FuzzExchange(f *testing.F) {
	prep, exec := prepareCall("s1"), execCall("s1", 42, "ann")
	f.Add(append(prep.Request, exec.Request...), append(prep.Response, exec.Response...), uint16(9))
	f.Add(msg('Q', "copy t from stdin\x00"), enc(&pgproto3.CopyInResponse{}), uint16(2))
	f.Add(startup("user", "u"), enc(&pgproto3.AuthenticationOk{}, &pgproto3.ReadyForQuery{TxStatus: 'I'}), uint16(3))
	f.Fuzz(func(t *testing.T, req, resp []byte, cut uint16) {
		p := postgres.Protocol
		b := p.NewBook()
		b.Learn(wire.Call{Request: req, Response: resp, Conn: 1})
		whole := p.NewSession(b).Units(wire.Call{Request: req, Response: resp, Conn: 1})
		c := int(cut) % (len(resp) + 1)
		s := p.NewSession(b)
		split := append(s.Units(wire.Call{Request: req, Response: resp[:c], Conn: 1}), s.Units(wire.Call{Response: resp[c:], Conn: 1})...)
		if len(whole) > 0 && whole[0].Req.Op != "?" && len(split) != len(whole) {
			t.Fatalf("%d units whole, %d with the answer cut at %d", len(whole), len(split), c)
		}
		a := p.NewAnswerer(wire.Env{Book: b, MaxMessage: 1 << 16})
		buf := req
		for range 64 {
			r, n, _, err := a.Next(buf)
			if err != nil || n == 0 {
				break
			}
			if r.Local {
				a.Synth(&r)
			} else if resp, _, ok := b.Fallback(&r); ok {
				a.Reply(&r, resp)
			} else {
				a.Missing(&r, "fuzz")
			}
			buf = buf[n:]
		}
		p.Decode(wire.Client, req)
		p.Decode(wire.Server, resp)
	})
}
