package redis_test

import (
	"bytes"
	"testing"

	"github.com/retrace-dev/retrace/wire/redis"
)

func TestParseCommand(t *testing.T) {
	cases := []struct {
		name string
		in   string
		args []string
		n    int
		err  bool
	}{
		{"array", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", []string{"GET", "k"}, 20, false},
		{"pipeline takes the first", "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", []string{"PING"}, 14, false},
		{"inline", "PING hello\r\n", []string{"PING", "hello"}, 12, false},
		{"partial header", "*2\r", nil, 0, false},
		{"partial bulk", "*2\r\n$3\r\nGET\r\n$10\r\nab", nil, 0, false},
		{"binary safe", "*2\r\n$3\r\nSET\r\n$4\r\na\r\nb\r\n", []string{"SET", "a\r\nb"}, 23, false},
		{"bad count", "*x\r\n", nil, 0, true},
		{"not bulk", "*1\r\n:1\r\n", nil, 0, true},
		{"missing CRLF after bulk", "*1\r\n$1\r\nabc\r\n", nil, 0, true},
		{"huge argument", "*1\r\n$999999999999\r\n", nil, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args, n, err := redis.ParseCommand([]byte(tc.in), 1<<20)
			if (err != nil) != tc.err || n != tc.n || len(args) != len(tc.args) {
				t.Fatalf("ParseCommand(%q) = %q %d %v", tc.in, args, n, err)
			}
			for i := range args {
				if string(args[i]) != tc.args[i] {
					t.Fatalf("arg %d = %q, want %q", i, args[i], tc.args[i])
				}
			}
		})
	}
}

func TestReplyLenRESP3(t *testing.T) {
	cases := map[string]string{
		"simple":    "+OK\r\n",
		"error":     "-ERR x\r\n",
		"null bulk": "$-1\r\n",
		"bulk":      "$3\r\nabc\r\n",
		"map":       "%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n*2\r\n_\r\n,1.5\r\n",
		"set":       "~2\r\n#t\r\n(12345678901234567890\r\n",
		"push":      ">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n",
		"attribute": "|1\r\n+key\r\n+val\r\n:7\r\n",
		"verbatim":  "=8\r\ntxt:abcd\r\n",
		"blob err":  "!3\r\nbad\r\n",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			b := []byte(in + "+NEXT\r\n")
			n, err := redis.ReplyLen(b)
			if err != nil || n != len(in) {
				t.Fatalf("ReplyLen(%q) = %d, %v; want %d", in, n, err, len(in))
			}
			for i := range len(in) {
				if n, err := redis.ReplyLen([]byte(in[:i])); n != 0 || err != nil {
					t.Fatalf("prefix of %d bytes: %d, %v", i, n, err)
				}
			}
		})
	}
}

func TestSetupAndOps(t *testing.T) {
	args := func(s ...string) [][]byte {
		var out [][]byte
		for _, a := range s {
			out = append(out, []byte(a))
		}
		return out
	}
	if op := redis.Op(args("client", "setinfo", "lib-name", "x")); op != "CLIENT SETINFO" || !redis.IsSetup(args("client", "setinfo")) {
		t.Fatalf("CLIENT SETINFO: op %q", op)
	}
	if redis.IsSetup(args("GET", "k")) || redis.Key(args("get", "k")) != "k" {
		t.Fatal("GET k")
	}
	for _, c := range [][][]byte{args("HELLO", "3"), args("HELLO", "2"), args("PING"), args("PING", "x"), args("AUTH", "p"), args("SELECT", "1")} {
		r := redis.SetupReply(c)
		if n, err := redis.ReplyLen(r); err != nil || n != len(r) {
			t.Fatalf("SetupReply(%q) = %q is not one reply", c, r)
		}
	}
	if e := redis.Error("a\r\nb"); !bytes.Equal(e, []byte("-ERR a  b\r\n")) {
		t.Fatalf("Error = %q", e)
	}
}

func FuzzParseCommand(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"))
	f.Add([]byte("PING\r\n"))
	f.Add([]byte("*3\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n"))
	f.Add([]byte("*1000000\r\n$1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		args, n, err := redis.ParseCommand(b, 1<<16)
		if err != nil || n == 0 {
			return
		}
		if n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		if b[0] == '*' { // round trip
			var s []string
			for _, a := range args {
				s = append(s, string(a))
			}
			if enc := redis.Command(s...); !bytes.Equal(enc, b[:n]) {
				again, m, err := redis.ParseCommand(enc, 1<<16)
				if err != nil || m != len(enc) || len(again) != len(args) {
					t.Fatalf("re-encoded %q does not parse back: %v", enc, err)
				}
			}
		}
		redis.Op(args)
		redis.Key(args)
		redis.IsSetup(args)
		redis.SetupReply(args)
	})
}

func FuzzReplyLen(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$3\r\nabc\r\n", "*2\r\n:1\r\n$-1\r\n", "%1\r\n+a\r\n|1\r\n+x\r\n+y\r\n:2\r\n", ">1\r\n=3\r\nabc\r\n", "*99999999\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := redis.ReplyLen(b)
		if err == nil && n > len(b) {
			t.Fatalf("length %d beyond %d bytes", n, len(b))
		}
	})
}
