package postgres_test

import (
	"encoding/binary"
	"errors"
	"testing"

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
		want postgres.Verdict
	}{
		{"startup", st, postgres.Sure},
		{"startup and more", append(append([]byte{}, st...), msg('Q', "x\x00")...), postgres.Sure},
		{"startup, half", st[:len(st)/2], postgres.NotYet},
		{"startup, header only", st[:8], postgres.NotYet},
		{"three bytes", st[:3], postgres.NotYet},
		{"ssl request", request(postgres.SSLRequestCode), postgres.Sure},
		{"gssenc request", request(postgres.GSSENCRequestCode), postgres.Sure},
		{"cancel request", request(postgres.CancelRequestCode, 0, 0, 0, 1, 0, 0, 0, 2), postgres.Sure},
		{"cancel request, short", request(postgres.CancelRequestCode, 0, 0), postgres.No},
		{"ssl request, long", request(postgres.SSLRequestCode, 0), postgres.No},
		{"http", []byte("GET / HTTP/1.1\r\n"), postgres.No},
		{"resp", []byte("*1\r\n$4\r\nPING\r\n"), postgres.No},
		{"version 2", []byte{0, 0, 0, 9, 0, 2, 0, 0, 0}, postgres.No},
		{"startup not NUL-terminated", []byte("\x00\x00\x00\x10\x00\x03\x00\x00user\x00u\x00x"), postgres.No},
		{"huge length", []byte{0, 1, 0, 0, 0, 3, 0, 0}, postgres.No},
		{"typed message", msg('Q', "select 1\x00"), postgres.No},
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
	if _, _, err := postgres.Next(msg('D', string(make([]byte, 100))), false, false, 50); !errors.Is(err, postgres.ErrTooLarge) {
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

type framed struct {
	typ  byte
	code uint32
	body string
}

func frameAll(t testing.TB, b []byte, sizes []int) []framed {
	t.Helper()
	f := &postgres.Framer{Frontend: true}
	var out []framed
	for _, n := range sizes {
		f.Feed(b[:n])
		b = b[n:]
		for {
			m, ok, err := f.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			out = append(out, framed{m.Type, m.Code, string(m.Body)})
		}
	}
	return out
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
	f := &postgres.Framer{}
	f.AwaitEncryptionAnswer()
	f.Feed([]byte("N"))
	f.Feed(msg('R', "\x00\x00\x00\x00"))
	f.Feed(msg('Z', "I")[:3])
	var types []byte
	for {
		m, ok, err := f.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		types = append(types, m.Type)
	}
	if string(types) != "NR" || f.Buffered() != 3 {
		t.Fatalf("types %q, buffered %d", types, f.Buffered())
	}
}

func TestFramerError(t *testing.T) {
	f := &postgres.Framer{Frontend: true}
	f.Feed([]byte("GET / HTTP/1.1\r\n\r\n"))
	if _, _, err := f.Next(); err == nil {
		t.Fatal("no error for HTTP bytes")
	} else if _, _, err2 := f.Next(); err2 != err {
		t.Fatalf("error not kept: %v then %v", err, err2)
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
		{"parse and sync", append(msg('P', "\x00select 1\x00\x00\x00"), msg('S', "")...), false},
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
