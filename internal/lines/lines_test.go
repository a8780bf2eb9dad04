package lines

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type got struct {
	line    string
	tooLong bool
}

func readAll(t *testing.T, r io.Reader, size, max int) []got {
	t.Helper()
	l := NewReader(r, size, max)
	var out []got
	for {
		line, tooLong, err := l.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, got{string(line), tooLong})
		require.Equal(t, len(out), l.Line())
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want []got
	}{
		{"empty", "", 10, nil},
		{"lines", "a\nbb\r\n\nccc", 10, []got{{"a", false}, {"bb", false}, {"", false}, {"ccc", false}}},
		{"at the cap", "12345\n1234\n", 5, []got{{"12345", false}, {"1234", false}}},
		{"over the cap", "123456789\nok\n", 5, []got{{"12345", true}, {"ok", false}}},
		{"last line over the cap", "ok\n123456789", 5, []got{{"ok", false}, {"12345", true}}},
		// a line longer than the read buffer (16 bytes, bufio's minimum)
		{"longer than the buffer", strings.Repeat("x", 40) + "\nend\n", 100, []got{{strings.Repeat("x", 40), false}, {"end", false}}},
		{"longer than buffer and cap", strings.Repeat("x", 40) + "\nend\n", 20, []got{{strings.Repeat("x", 20), true}, {"end", false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, readAll(t, strings.NewReader(tc.in), 16, tc.max))
			// however the reads are split
			assert.Equal(t, tc.want, readAll(t, iotest.OneByteReader(strings.NewReader(tc.in)), 16, tc.max))
		})
	}
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	l := NewReader(io.MultiReader(strings.NewReader("a\n"), iotest.ErrReader(boom)), 16, 10)
	line, _, err := l.Next()
	require.NoError(t, err)
	assert.Equal(t, "a", string(line))
	_, _, err = l.Next()
	assert.ErrorIs(t, err, boom)
}

// FuzzReader checks Reader against bufio.Scanner-like splitting done by
// hand: the same lines, each cut at max, whatever the buffer size.
func FuzzReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\nccc"), 3, 16)
	f.Add([]byte(strings.Repeat("x", 100)+"\n"), 10, 20)
	f.Fuzz(func(t *testing.T, in []byte, max, size int) {
		max = 1 + abs(max)%200
		size = 16 + abs(size)%64
		var want []got
		rest := in
		for len(rest) > 0 {
			line := rest
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				line, rest = rest[:i+1], rest[i+1:]
			} else {
				rest = nil
			}
			line = bytes.TrimSuffix(line, []byte("\n"))
			g := got{tooLong: len(line) > max}
			if g.tooLong {
				line = line[:max]
			}
			g.line = string(bytes.TrimRight(line, "\r\n"))
			want = append(want, g)
		}
		l := NewReader(bufio.NewReader(bytes.NewReader(in)), size, max)
		for i := 0; ; i++ {
			line, tooLong, err := l.Next()
			if errors.Is(err, io.EOF) {
				if i != len(want) {
					t.Fatalf("%d lines, want %d", i, len(want))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if i >= len(want) || string(line) != want[i].line || tooLong != want[i].tooLong {
				t.Fatalf("line %d: %q %v, want %+v", i+1, line, tooLong, want)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
