package postgres_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/postgres"
)

// startup returns a StartupMessage with the given parameters.
func startup(kv ...string) []byte {
	b := []byte{0, 0, 0, 0, 0, 3, 0, 0}
	for _, s := range kv {
		b = append(append(b, s...), 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

func request(code uint32, extra ...byte) []byte {
	b := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(8+len(extra))), code)
	return append(b, extra...)
}

// msg returns a typed message.
func msg(t byte, body string) []byte {
	b := []byte{t, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

func TestDetect(t *testing.T) {
	st := startup("user", "u", "database", "d")
	cases := []struct {
		name string
		in   []byte
		want wire.Verdict
	}{
		{"startup", st, wire.Sure},
		{"startup and more", append(append([]byte{}, st...), msg('Q', "x\x00")...), wire.Sure},
		{"startup, half", st[:len(st)/2], wire.NotYet},
		{"startup, header only", st[:8], wire.NotYet},
		{"three bytes", st[:3], wire.NotYet},
		{"ssl request", request(postgres.SSLRequestCode), wire.Sure},
		{"gssenc request", request(postgres.GSSENCRequestCode), wire.Sure},
		{"cancel request", request(postgres.CancelRequestCode, 0, 0, 0, 1, 0, 0, 0, 2), wire.Sure},
		{"cancel request, short", request(postgres.CancelRequestCode, 0, 0), wire.No},
		{"ssl request, long", request(postgres.SSLRequestCode, 0), wire.No},
		{"http", []byte("GET / HTTP/1.1\r\n"), wire.No},
		{"resp", []byte("*1\r\n$4\r\nPING\r\n"), wire.No},
		{"version 2", []byte{0, 0, 0, 9, 0, 2, 0, 0, 0}, wire.No},
		{"startup not NUL-terminated", []byte("\x00\x00\x00\x10\x00\x03\x00\x00user\x00u\x00x"), wire.No},
		{"huge length", []byte{0, 1, 0, 0, 0, 3, 0, 0}, wire.No},
		{"typed message", msg('Q', "select 1\x00"), wire.No},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := postgres.Detect(tc.in); got != tc.want {
				t.Errorf("Detect(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	st := startup("user", "u")
	m, n, err := postgres.Next(st, true, true, 0)
	if err != nil || n != len(st) || !m.IsStartup() || string(m.Body) != "user\x00u\x00\x00" {
		t.Fatalf("startup: %+v %d %v", m, n, err)
	}
	q := msg('Q', "select 1\x00")
	m, n, err = postgres.Next(q, true, false, 0)
	if err != nil || n != len(q) || m.Type != 'Q' || postgres.CString(m.Body) != "select 1" {
		t.Fatalf("query: %+v %d %v", m, n, err)
	}
	if _, n, err := postgres.Next(q[:len(q)-1], true, false, 0); n != 0 || err != nil {
		t.Fatalf("partial query: %d %v", n, err)
	}
	if _, _, err := postgres.Next([]byte{'Q', 0, 0, 0, 3}, true, false, 0); !errors.Is(err, postgres.ErrLength) {
		t.Fatalf("length 3: %v", err)
	}
	if _, _, err := postgres.Next(msg('D', string(make([]byte, 100))), false, false, 50); !errors.Is(err, wire.ErrTooLong) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, _, err := postgres.Next([]byte{0, 0, 0, 8, 0, 9, 0, 0}, true, true, 0); !errors.Is(err, postgres.ErrStartup) {
		t.Fatalf("unknown code: %v", err)
	}
}

// stream is a client's whole conversation: SSLRequest, StartupMessage,
// SASL, then the extended protocol, COPY and Terminate.
func stream() []byte {
	var b []byte
	b = append(b, request(postgres.SSLRequestCode)...)
	b = append(b, startup("user", "retrace", "database", "db")...)
	b = append(b, msg('p', "SCRAM-SHA-256\x00\x00\x00\x00\x04n,,x")...)
	b = append(b, msg('P', "s1\x00select $1::int\x00\x00\x00")...)
	b = append(b, msg('D', "Ss1\x00")...)
	b = append(b, msg('S', "")...)
	b = append(b, msg('B', "\x00s1\x00\x00\x01\x00\x01\x00\x01\x00\x00\x00\x04\x00\x00\x00\x07\x00\x01\x00\x01")...)
	b = append(b, msg('E', "\x00\x00\x00\x00\x00")...)
	b = append(b, msg('S', "")...)
	b = append(b, msg('Q', "copy t from stdin\x00")...)
	b = append(b, msg('d', "1\tone\n")...)
	b = append(b, msg('c', "")...)
	b = append(b, msg('X', "")...)
	return b
}

func TestFramerAnySplit(t *testing.T) {
	whole := stream()
	want := frameAll(t, whole, []int{len(whole)})
	if len(want) != 13 {
		t.Fatalf("%d messages, want 13", len(want))
	}
	for cut := 1; cut < len(whole); cut++ {
		got := frameAll(t, whole, []int{cut, len(whole) - cut})
		if !equalMessages(got, want) {
			t.Fatalf("split at %d: %v, want %v", cut, got, want)
		}
	}
	ones := make([]int, len(whole))
	for i := range ones {
		ones[i] = 1
	}
	if got := frameAll(t, whole, ones); !equalMessages(got, want) {
		t.Fatalf("byte by byte: %v", got)
	}
}

// framed is one message a framer cut, as its bytes.
type framed string

// frameAll feeds b to a client framer in pieces of the given sizes.
func frameAll(t testing.TB, b []byte, sizes []int) []framed {
	t.Helper()
	out, err := frameWith(postgres.NewFrontendFramer(0), b, sizes)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// frameWith feeds b to f in pieces of the given sizes, the caller's
// buffer growing as a connection's would, and returns the messages.
func frameWith(f wire.Framer, b []byte, sizes []int) ([]framed, error) {
	var buf []byte
	var out []framed
	for _, n := range sizes {
		buf = append(buf, b[:n]...)
		b = b[n:]
		for {
			m, err := f.Next(buf)
			if err != nil {
				return out, err
			}
			if m == 0 {
				break
			}
			out = append(out, framed(buf[:m]))
			buf = buf[m:]
		}
	}
	return out, nil
}

func equalMessages(a, b []framed) bool {
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

func TestServerFramerEncryptionAnswer(t *testing.T) {
	f := postgres.NewBackendFramer(0)
	f.Request(request(postgres.SSLRequestCode))
	in := append(append([]byte("N"), msg('R', "\x00\x00\x00\x00")...), msg('Z', "I")[:3]...)
	got, err := frameWith(f, in, []int{len(in)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "N" || got[1][0] != 'R' {
		t.Fatalf("messages %q", got)
	}
}

func TestFramerError(t *testing.T) {
	f := postgres.NewFrontendFramer(0)
	if _, err := f.Next([]byte("GET / HTTP/1.1\r\n\r\n")); err == nil {
		t.Fatal("no error for HTTP bytes")
	}
	if _, err := postgres.NewBackendFramer(100).Next(msg('D', string(make([]byte, 200)))); !errors.Is(err, wire.ErrTooLong) {
		t.Fatalf("over the limit: %v", err)
	}
}

func TestSetupWrite(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want bool
	}{
		{"startup", startup("user", "u"), true},
		{"ssl request", request(postgres.SSLRequestCode), true},
		{"cancel", request(postgres.CancelRequestCode, 1, 2, 3, 4, 5, 6, 7, 8), true},
		{"sasl", msg('p', "SCRAM-SHA-256\x00"), true},
		{"terminate", msg('X', ""), true},
		{"pgx ping", msg('Q', "-- ping\x00"), true},
		{"empty query", msg('Q', ";\x00"), true},
		{"query", msg('Q', "select 1\x00"), false},
		{"session settings", msg('Q', "SET statement_timeout = '30s'; set search_path TO app\x00"), true},
		{"reset", msg('Q', "RESET ALL\x00"), true},
		{"set session", msg('Q', "SET SESSION timezone = 'UTC'\x00"), true},
		{"set local", msg('Q', "SET LOCAL statement_timeout = 0\x00"), false},
		{"set transaction", msg('Q', "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE\x00"), false},
		{"set session characteristics", msg('Q', "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY\x00"), false},
		{"set, then a query", msg('Q', "SET x = 1; SELECT 1\x00"), false},
		{"prepare", append(append(msg('P', "s1\x00select 1\x00\x00\x00"), msg('D', "Ss1\x00")...), msg('S', "")...), true},
		{"close", append(msg('C', "Ss1\x00"), msg('S', "")...), true},
		{"parse, bind, execute", append(append(append(msg('P', "\x00select 1\x00\x00\x00"), msg('B', "\x00\x00\x00\x00\x00\x00\x00\x00")...), msg('E', "\x00\x00\x00\x00\x00")...), msg('S', "")...), false},
		{"describe portal", append(msg('D', "P\x00"), msg('S', "")...), false},
		{"partial", msg('X', "")[:3], false},
		{"empty", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := postgres.SetupWrite(tc.in); got != tc.want {
				t.Errorf("SetupWrite(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestNormalizeSQL(t *testing.T) {
	cases := []struct{ in, norm string }{
		{"SELECT  v FROM t WHERE id = 42;", "SELECT v FROM t WHERE id = ?"},
		{"select $1::int, 'it''s', E'a\\'b' -- comment\n from t1", "select $1::int, ?, ? from t1"},
		{"select $$x$$ || $tag$y$tag$, \"Col 1\", 1.5e-3", "select ? || ?, \"Col 1\", ?"},
		{"/* c */ insert into t values ($1, 2)", "insert into t values ($1, ?)"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			if got, _ := postgres.NormalizeSQL(tc.in); got != tc.norm {
				t.Errorf("NormalizeSQL(%q) = %q, want %q", tc.in, got, tc.norm)
			}
		})
	}
	if _, lits := postgres.NormalizeSQL("select 'a', 7"); len(lits) != 2 || lits[0] != "'a'" || lits[1] != "7" {
		t.Errorf("literals %q", lits)
	}
}
