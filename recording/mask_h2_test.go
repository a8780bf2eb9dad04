package recording

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

func h2Half(fields [][2]string, data []byte, trailer [][2]string, pace []http2.Mark) []byte {
	var m http2.Message
	for _, f := range fields {
		m.Header = append(m.Header, hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for _, f := range trailer {
		m.Trailer = append(m.Trailer, hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	m.Data = data
	return http2.AppendMessage(nil, m, pace)
}

// TestMaskH2: a recorded HTTP/2 half is masked field by field and in its
// body, and stays in the recorded form (its DATA length follows the body).
func TestMaskH2(t *testing.T) {
	m := testMasker(t)
	req := h2Half([][2]string{{":method", "POST"}, {":path", "/login?password=hunter2&x=1"}, {"authorization", "Bearer abc.def"}, {"content-type", "application/json"}},
		[]byte(`{"password":"hunter2","user":{"phone":"+441234567890"}}`), nil, nil)
	out, changed := m.Mask("http2", req)
	require.True(t, changed)
	got, _, err := http2.ParseMessage(out)
	require.NoError(t, err, "%q", out)
	path, _ := http2.Get(got.Header, ":path")
	require.NotContains(t, path, "hunter2")
	auth, _ := http2.Get(got.Header, "authorization")
	require.Equal(t, "***", auth)
	require.NotContains(t, string(got.Data), "hunter2")
	require.Contains(t, string(got.Data), `"phone":"[phone]"`)
	method, _ := http2.Get(got.Header, ":method")
	require.Equal(t, "POST", method)

	// gRPC: metadata by the header rules; messages by their protobuf
	// string fields, lengths re-encoded
	msg := grpc.Append(nil, grpc.Message{Data: []byte("\x0a\x10Bearer abc.defgh")})
	resp := h2Half([][2]string{{":status", "200"}, {"content-type", "application/grpc"}}, msg,
		[][2]string{{"grpc-status", "0"}, {"x-api-key", "k1"}}, []http2.Mark{{Request: 5, Response: len(msg)}})
	r := &maskRun{m: m}
	out = r.mask("grpc", wire.Server, resp)
	got, pace, err := http2.ParseMessage(out)
	require.NoError(t, err)
	masked := grpc.Append(nil, grpc.Message{Data: []byte("\x0a\x0eBearer [token]")})
	require.Equal(t, []http2.Mark{{Request: 5, Response: len(masked)}}, pace, "the pace follows the masked message")
	key, _ := http2.Get(got.Trailer, "x-api-key")
	require.Equal(t, "[key]", key)
	require.Equal(t, masked, got.Data)
	require.Zero(t, r.skipped)

	// nothing to mask: the same bytes
	plain := h2Half([][2]string{{":status", "204"}}, nil, nil, nil)
	out, changed = m.Mask("http2", plain)
	require.False(t, changed)
	require.Equal(t, plain, out)

	// not the recorded form: masked as text, counted
	r = &maskRun{m: m}
	require.Equal(t, "Bearer [token]", string(r.mask("grpc", wire.Server, []byte("Bearer x"))))
	require.Equal(t, 1, r.skipped)
}

// FuzzMaskH2: masking a recorded HTTP/2 half never fails, and what parsed
// still parses.
func FuzzMaskH2(f *testing.F) {
	f.Add([]byte(h2Half([][2]string{{":path", "/a?password=x"}, {"authorization", "Bearer q"}}, []byte(`{"password":"p"}`), [][2]string{{"grpc-status", "0"}}, nil)))
	f.Add([]byte(h2Half([][2]string{{":status", "200"}}, grpc.Append(nil, grpc.Message{Data: []byte("Bearer abcdef")}), nil, []http2.Mark{{Request: 1, Response: 2}})))
	f.Add([]byte("\r\nDATA 0\r\n"))
	rules, err := ParseMasker(strings.NewReader(testRules), "rules")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		for _, proto := range []string{"http2", "grpc"} {
			out, _ := rules.Mask(proto, p)
			if _, _, err := http2.ParseMessage(p); err == nil {
				if _, _, err := http2.ParseMessage(out); err != nil {
					t.Fatalf("%s: %q masked to %q, which does not parse: %v", proto, p, out, err)
				}
			}
		}
	})
}
