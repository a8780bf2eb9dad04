package recording

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// FuzzScanStream feeds arbitrary bytes to the JSONL reader: it never fails
// on content, and every non-blank line is either a session or a reported
// skip.
func FuzzScanStream(f *testing.F) {
	good, _ := Marshal(sampleSession("a"))
	f.Add(append(append([]byte{}, good...), '\n'), 64)
	f.Add([]byte("{\"v\":1,\"id\":\"x\"}\r\n\n{bad\n"+strings.Repeat("z", 100)), 16)
	f.Add([]byte("\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, maxLine int) {
		if maxLine <= 0 || maxLine > 1<<16 {
			maxLine = 1 << 16
		}
		skips := 0
		o := NewSettings([]Option{WithMaxLine(maxLine), WithErrorHandler(func(error) { skips++ })})
		var sk SkipCounter
		n := 0
		err := ReadJSONL(context.Background(), "fuzz.jsonl", bytes.NewReader(data), o, &sk, func(*Session) error {
			n++
			return nil
		})
		if err != nil {
			t.Fatalf("scan failed on content: %v", err)
		}
		want := 0 // lines that must come out as a session or a skip
		parts := bytes.Split(data, []byte("\n"))
		for i, l := range parts {
			withNL := len(l)
			if i < len(parts)-1 {
				withNL++ // the reader counts the newline against the cap
			}
			if withNL > maxLine || len(bytes.TrimSpace(l)) > 0 {
				want++
			}
		}
		if int64(skips) != sk.Skipped() || n+skips != want {
			t.Fatalf("%d sessions + %d skips (counted %d), want %d lines", n, skips, sk.Skipped(), want)
		}
	})
}
