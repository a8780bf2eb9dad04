package mysql_test

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/retrace-dev/retrace/wire/mysql"
)

func packet(seq byte, p []byte) []byte {
	l := len(p)
	return append([]byte{byte(l), byte(l >> 8), byte(l >> 16), seq}, p...)
}

func TestNormalizeSQL(t *testing.T) {
	cases := []struct {
		name, in, norm string
		lits           []string
	}{
		{"numbers", "SELECT v FROM t WHERE id = 42", "SELECT v FROM t WHERE id = ?", []string{"42"}},
		{"strings and escapes", `UPDATE t SET v = 'it''s', w = "a\"b" WHERE id=7`, "UPDATE t SET v = ?, w = ? WHERE id=?", []string{`'it''s'`, `"a\"b"`, "7"}},
		{"identifiers with digits", "SELECT c1 FROM t2 WHERE x = 1.5e-3", "SELECT c1 FROM t2 WHERE x = ?", []string{"1.5e-3"}},
		{"white space", "SELECT\n  a ,\tb FROM `t 1`", "SELECT a , b FROM `t 1`", nil},
		{"hex", "SELECT 0xFF", "SELECT ?", []string{"0xFF"}},
		{"placeholders kept", "SELECT v FROM t WHERE id IN (?, ?)", "SELECT v FROM t WHERE id IN (?, ?)", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			norm, lits := mysql.NormalizeSQL(tc.in)
			if norm != tc.norm || !slices.Equal(lits, tc.lits) {
				t.Fatalf("NormalizeSQL(%q) = %q %q, want %q %q", tc.in, norm, lits, tc.norm, tc.lits)
			}
		})
	}
}

func TestNextMessageJoinsFullSizePackets(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, 0xffffff)
	stream := append(packet(0, big), packet(1, []byte("tail"))...)
	stream = append(stream, packet(0, []byte{mysql.ComPing})...)
	p, seq, n, err := mysql.NextMessage(stream, 64<<20)
	if err != nil || len(p) != 0xffffff+4 || seq != 1 || n != 0xffffff+4+8 {
		t.Fatalf("NextMessage: len %d seq %d n %d err %v", len(p), seq, n, err)
	}
	p, _, _, err = mysql.NextMessage(stream[n:], 64<<20)
	if err != nil || !bytes.Equal(p, []byte{mysql.ComPing}) {
		t.Fatalf("second message %q, %v", p, err)
	}
	if _, _, n, err := mysql.NextMessage(stream[:100], 64<<20); n != 0 || err != nil {
		t.Fatalf("partial message: n %d err %v", n, err)
	}
	if _, _, _, err := mysql.NextMessage(stream[:100], 1000); err == nil {
		t.Fatal("message over the limit accepted")
	}
}

func TestResequenceAndStmtID(t *testing.T) {
	prepOK := []byte{0x00, 7, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0}
	resp := append(packet(1, prepOK), packet(2, []byte{0xfe, 0, 0, 2, 0})...)
	if id, ok := mysql.StmtID(resp); !ok || id != 7 {
		t.Fatalf("StmtID = %d, %v", id, ok)
	}
	out := mysql.Resequence(mysql.WithStmtID(resp, 99), 5)
	if id, _ := mysql.StmtID(out); id != 99 {
		t.Fatalf("rewritten id %d", id)
	}
	if out[3] != 5 || out[4+len(prepOK)+3] != 6 {
		t.Fatalf("sequence ids %d %d, want 5 6", out[3], out[4+len(prepOK)+3])
	}
	if id, _ := mysql.StmtID(resp); id != 7 {
		t.Fatal("WithStmtID changed its input")
	}
}

// TestGreetingClearsCompressionKeepsTLS: the mock's greeting offers TLS
// when the recorded one did (the client's SSL request is then consumed:
// TestSSLRequest), never compression.
func TestGreetingClearsCompressionKeepsTLS(t *testing.T) {
	def := mysql.DefaultGreeting(1)
	p, ok := mysql.FindGreeting(def)
	if !ok {
		t.Fatal("default greeting not recognised")
	}
	// turn TLS and compression on, then let Greeting clear them
	v := bytes.IndexByte(p[1:], 0)
	capOff := 1 + v + 1 + 4 + 8 + 1
	c := binary.LittleEndian.Uint16(p[capOff:]) | mysql.CapSSL | mysql.CapCompress
	binary.LittleEndian.PutUint16(p[capOff:], c)
	g := mysql.Greeting(p, 77)
	gp, _ := mysql.FindGreeting(g)
	if got := binary.LittleEndian.Uint16(gp[capOff:]); got&mysql.CapCompress != 0 || got&mysql.CapSSL == 0 {
		t.Fatalf("capabilities %#x: compression offered or TLS not", got)
	}
	if id := binary.LittleEndian.Uint32(gp[1+v+1:]); id != 77 {
		t.Fatalf("connection id %d", id)
	}
}

func TestErrPacket(t *testing.T) {
	e := mysql.Err(3, 1105, "HY000", "no mock")
	p, seq, _, ok := mysql.NextPacket(e)
	if !ok || seq != 3 || p[0] != 0xff || string(p[4:9]) != "HY000" || string(p[9:]) != "no mock" {
		t.Fatalf("Err packet %q", e)
	}
}

func FuzzNextMessage(f *testing.F) {
	f.Add(packet(0, []byte("\x03SELECT 1")))
	f.Add(append(packet(0, []byte{0x19, 1, 0, 0, 0}), packet(0, []byte{0x0e})...))
	f.Add([]byte{0xff, 0xff, 0xff, 0, 'a'})
	f.Add(mysql.DefaultGreeting(3))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, _, n, err := mysql.NextMessage(b, 1<<16)
		if err == nil && (n > len(b) || len(p) > n || len(p) > 1<<16) {
			t.Fatalf("n %d payload %d for %d bytes", n, len(p), len(b))
		}
		if g, ok := mysql.FindGreeting(b); ok {
			mysql.Greeting(g, 1)
		}
		mysql.StmtID(b)
		mysql.WithStmtID(b, 1)
		mysql.Resequence(b, 1)
		mysql.RequestStmtID(b)
	})
}

func FuzzNormalizeSQL(f *testing.F) {
	for _, s := range []string{"SELECT 1", `SELECT 'a\'b' FROM t WHERE x = "y" AND z = 1e+5`, "INSERT INTO `t` VALUES (0x1F, 'x''y')", "SET NAMES utf8mb4", "'unterminated"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		norm, _ := mysql.NormalizeSQL(q)
		if len(norm) > len(q) {
			t.Fatalf("normal form of %d bytes grew to %d", len(q), len(norm))
		}
		again, lits := mysql.NormalizeSQL(norm)
		if again != norm || len(lits) != 0 {
			t.Fatalf("not idempotent: %q → %q → %q %q", q, norm, again, lits)
		}
		mysql.IsSetupQuery(q)
	})
}

func TestSSLRequest(t *testing.T) {
	ssl := make([]byte, 32)
	binary.LittleEndian.PutUint32(ssl, mysql.CapSSL|0x00000200)
	if !mysql.IsSSLRequest(ssl) {
		t.Fatal("SSL request not recognised")
	}
	full := append(append([]byte(nil), ssl...), "root\x00"...)
	if mysql.IsSSLRequest(full) {
		t.Fatal("a whole HandshakeResponse41 taken for an SSL request")
	}
	binary.LittleEndian.PutUint32(ssl, 0x00000200)
	if mysql.IsSSLRequest(ssl) {
		t.Fatal("32 bytes without CLIENT_SSL taken for an SSL request")
	}
}
