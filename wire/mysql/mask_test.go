package mysql_test

import (
	"testing"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

func maskRules() *wiretest.Rules {
	return &wiretest.Rules{Patterns: []wiretest.Pattern{
		wiretest.Pat(`\b(?:\d[\s-]?){12,18}\d\b`, "[card]"),
		wiretest.Pat(`(?i)(bearer\s+)[A-Za-z0-9._-]+`, "${1}[token]"),
	}}
}

func lenc(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// columnDef is a protocol 4.1 column definition of type t.
func columnDef(name string, t byte) []byte {
	return cat(lenc("def"), lenc("db"), lenc("t"), lenc("t"), lenc(name), lenc(name),
		[]byte{0x0c, 0x21, 0x00, 0xff, 0, 0, 0, t, 0, 0, 0, 0, 0})
}

var (
	eof = []byte{0xfe, 0, 0, 0x02, 0}
	// COM_STMT_EXECUTE of statement 1 with (BIGINT 7, VARCHAR s), types sent
	maskExecute = func(s string) []byte {
		return cat([]byte{0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0x00, 1, 0x08, 0, 0xfd, 0},
			[]byte{7, 0, 0, 0, 0, 0, 0, 0}, lenc(s))
	}
	textResult = func(v string) []byte {
		return cat(packet(1, []byte{2}), packet(2, columnDef("id", 0x03)), packet(3, columnDef("card", 0xfd)),
			packet(4, eof), packet(5, cat(lenc("1"), lenc(v))), packet(6, cat([]byte{0xfb}, lenc("x"))), packet(7, eof))
	}
	// a binary row of (INT 1, VARCHAR v) without EOF after the definitions
	binaryResult = func(v string) []byte {
		return cat(packet(1, []byte{2}), packet(2, columnDef("id", 0x03)), packet(3, columnDef("card", 0xfd)),
			packet(4, cat([]byte{0x00, 0x00}, []byte{1, 0, 0, 0}, lenc(v))), packet(5, []byte{0xfe, 0, 0, 0x02, 0, 0, 0}))
	}
)

var maskCases = []wiretest.MaskCase{
	{Name: "query literals",
		In:   packet(0, []byte("\x03SELECT c4111 FROM t WHERE c = '4111 1111 1111 1111' AND n = 4111111111111111 AND b = \"Bearer xyz\"")),
		Want: packet(0, []byte("\x03SELECT c4111 FROM t WHERE c = '[card]' AND n = [card] AND b = \"Bearer [token]\""))},
	{Name: "names and keywords are not literals",
		In:   packet(0, []byte("\x03SELECT `4111111111111111` FROM bearer_tokens")),
		Want: packet(0, []byte("\x03SELECT `4111111111111111` FROM bearer_tokens"))},
	{Name: "prepared statement and execute parameters",
		In:   cat(packet(0, []byte("\x16INSERT INTO t VALUES (?, '4111111111111111')")), packet(0, maskExecute("Bearer abc.def"))),
		Want: cat(packet(0, []byte("\x16INSERT INTO t VALUES (?, '[card]')")), packet(0, maskExecute("Bearer [token]")))},
	{Name: "execute with types bound earlier is reported",
		In:    packet(0, []byte{0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0x00, 0, 'x'}),
		Want:  packet(0, []byte{0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0x00, 0, 'x'}),
		Skips: 1},
	{Name: "long data", In: packet(0, cat([]byte{0x18, 1, 0, 0, 0, 1, 0}, []byte("4111111111111111"))),
		Want: packet(0, cat([]byte{0x18, 1, 0, 0, 0, 1, 0}, []byte("[card]")))},
	{Name: "handshake response kept", In: packet(1, cat([]byte{0x8d, 0xa6, 0x0f, 0, 0, 0, 0, 1, 0x21}, make([]byte, 23), []byte("4111111111111111\x00"))),
		Want: packet(1, cat([]byte{0x8d, 0xa6, 0x0f, 0, 0, 0, 0, 1, 0x21}, make([]byte, 23), []byte("4111111111111111\x00")))},
	{Name: "text result rows", Side: wire.Server, In: textResult("4111111111111111"), Want: textResult("[card]")},
	{Name: "binary result rows", Side: wire.Server, In: binaryResult("Bearer a.b.c"), Want: binaryResult("Bearer [token]")},
	{Name: "MariaDB's column count with metadata following", Side: wire.Server,
		In:   cat(packet(1, []byte{1, 1}), packet(2, columnDef("c", 0xfd)), packet(3, lenc("4111111111111111")), packet(4, []byte{0xfe, 0, 0, 2, 0, 0, 0})),
		Want: cat(packet(1, []byte{1, 1}), packet(2, columnDef("c", 0xfd)), packet(3, lenc("[card]")), packet(4, []byte{0xfe, 0, 0, 2, 0, 0, 0}))},
	{Name: "MariaDB's cached metadata: text rows of unknown types", Side: wire.Server,
		In:   cat(packet(1, []byte{1, 0}), packet(2, lenc("4111111111111111")), packet(3, []byte{0xfe, 0, 0, 2, 0, 0, 0})),
		Want: cat(packet(1, []byte{1, 0}), packet(2, lenc("[card]")), packet(3, []byte{0xfe, 0, 0, 2, 0, 0, 0}))},
	{Name: "error message", Side: wire.Server,
		In:   packet(1, []byte("\xff\x26\x04#23000Duplicate entry '4111111111111111' for key 'card'")),
		Want: packet(1, []byte("\xff\x26\x04#23000Duplicate entry '[card]' for key 'card'"))},
	{Name: "greeting kept", Side: wire.Server, In: packet(0, []byte("\x0a8.0.36\x004111111111111111\x00")),
		Want: packet(0, []byte("\x0a8.0.36\x004111111111111111\x00"))},
	{Name: "cut by the cap", In: cat(packet(0, []byte("\x03SELECT 1")), []byte{40, 0, 0, 0, 0x03}, []byte("SELECT '4111111111111111")),
		Want: cat(packet(0, []byte("\x03SELECT 1")), []byte{40, 0, 0, 0, 0x03}, []byte("SELECT '[card]"))},
}

func TestMask(t *testing.T) {
	m, ok := mysql.Protocol.(wire.Masker)
	if !ok {
		t.Fatal("mysql.Protocol is no wire.Masker")
	}
	wiretest.Masks(t, m, maskRules, maskCases...)
}

func FuzzMask(f *testing.F) {
	wiretest.FuzzMasker(f, mysql.Protocol.(wire.Masker), maskRules, wiretest.Whole(mysql.Protocol), maskCases...)
}
