package recording

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// the documented phone rule (mask.go) and a field rule
const leakRules = `json $..card
json $.password
regex \+?\b\d{7,12}(\d\d)\b *******$1
`

func leakMasker(t *testing.T) *Masker {
	m, err := ParseMasker(strings.NewReader(leakRules), "leaks.txt")
	require.NoError(t, err)
	return m
}

// bodyOf returns the body of an HTTP message, decoded by its
// Content-Encoding.
func bodyOf(t *testing.T, msg []byte) string {
	t.Helper()
	head, body, ok := bytes.Cut(msg, []byte("\r\n\r\n"))
	require.True(t, ok)
	var r io.Reader = bytes.NewReader(body)
	switch {
	case bytes.Contains(head, []byte("Content-Encoding: gzip")):
		zr, err := gzip.NewReader(r)
		require.NoError(t, err)
		r = zr
	case bytes.Contains(head, []byte("Content-Encoding: deflate")):
		zr, err := zlib.NewReader(r)
		require.NoError(t, err)
		r = zr
	case bytes.Contains(head, []byte("Content-Encoding: br")):
		r = brotli.NewReader(r)
	}
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

func encoded(t *testing.T, enc, s string) string {
	var b bytes.Buffer
	var w io.WriteCloser
	switch enc {
	case "gzip":
		w = gzip.NewWriter(&b)
	case "deflate":
		w = zlib.NewWriter(&b)
	case "br":
		w = brotli.NewWriter(&b)
	}
	_, err := w.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return b.String()
}

// Each way a secret stayed in clear: masked now.
func TestMaskLeaks(t *testing.T) {
	m := leakMasker(t)
	const card = "4111111111111111"
	secret := `{"card":"` + card + `","password":"hunter2","note":"x"}`
	type check func(t *testing.T, out []byte)
	noSecret := func(t *testing.T, out []byte) {
		body := bodyOf(t, out)
		assert.NotContains(t, body, card)
		assert.NotContains(t, body, "hunter2")
		assert.Contains(t, body, `"note":"x"`)
	}
	tests := []struct {
		name string
		in   string
		ok   check
	}{
		{"JSON sent as a form (curl's default Content-Type)",
			withLen("POST /pay HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n", secret), noSecret},
		{"JSON as text/plain",
			withLen("POST /pay HTTP/1.1\r\nContent-Type: text/plain\r\n", secret), noSecret},
		{"gzip body",
			withLen("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n", encoded(t, "gzip", secret)), noSecret},
		{"deflate body",
			withLen("HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\n", encoded(t, "deflate", secret)), noSecret},
		{"br body",
			withLen("HTTP/1.1 200 OK\r\nContent-Encoding: br\r\n", encoded(t, "br", secret)), noSecret},
		{"body over the cap",
			"POST /pay HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 90000\r\n\r\n" +
				`{"items":[{"sku":"a"}],"card":"` + card + `","password":"hunt`,
			func(t *testing.T, out []byte) {
				assert.NotContains(t, string(out), card)
				assert.NotContains(t, string(out), "hunt")
				assert.Contains(t, string(out), `{"items":[{"sku":"a"}],"card":"***","password":"***"`)
			}},
		{"chunked body over the cap",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + `{"password":"hunter2","card":"` + card[:6],
			func(t *testing.T, out []byte) {
				assert.NotContains(t, string(out), "hunter2")
				assert.NotContains(t, string(out), card[:6])
			}},
		{"URL-encoded phone in the query",
			"GET /lookup?phone=%2B4915112345678&x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
			func(t *testing.T, out []byte) {
				assert.NotContains(t, string(out), "15112345678")
				assert.Contains(t, string(out), "phone=%2A%2A%2A%2A%2A%2A%2A78&x=1")
			}},
		{"URL-encoded phone in a form body",
			withLen("POST /sms HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n", "to=%2B4915112345678&text=hi"),
			func(t *testing.T, out []byte) {
				assert.NotContains(t, string(out), "15112345678")
				assert.Contains(t, bodyOf(t, out), "to=%2A%2A%2A%2A%2A%2A%2A78&text=hi")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, changed := m.Mask("http", []byte(tc.in))
			assert.True(t, changed)
			tc.ok(t, out)
		})
	}
}

// What masking cannot read is counted in mask_skipped and logged once,
// never kept silently.
func TestMaskSkippedIsCountedAndLogged(t *testing.T) {
	var logs lockedBuffer
	w := &memWriter{}
	p, err := NewPipeline(PipelineConfig{Store: w, Sampler: all(t), Mask: leakMasker(t),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		s := sampleSession(id)
		s.Inbound.Response = []byte(withLen("HTTP/1.1 200 OK\r\nContent-Encoding: zstd\r\n", "\x28\xb5\x2f\xfd opaque"))
		s.Calls = nil
		require.True(t, p.Submit(s))
	}
	require.NoError(t, p.Close(context.Background()))
	assert.EqualValues(t, 2, p.Stats().MaskSkipped)
	lines := logs.lines("could not be masked")
	require.Len(t, lines, 1, "logged once")
	assert.Contains(t, lines[0], "zstd")
}

func FuzzMaskJSONPrefix(f *testing.F) {
	f.Add([]byte(`{"card":"4111","a":[1,{"card":2}],"password":"x`))
	f.Add([]byte(`[{"password":{"a":1}},"\"card\"",`))
	m, _ := ParseMasker(strings.NewReader(leakRules), "rules")
	f.Fuzz(func(t *testing.T, b []byte) {
		out := m.maskJSONPrefix(b)
		if !bytes.Contains(b, []byte("card")) && !bytes.Contains(b, []byte("password")) && !bytes.Equal(out, b) {
			t.Fatalf("changed JSON no rule names: %q → %q", b, out)
		}
	})
}
