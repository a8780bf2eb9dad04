package recording

import (
	"bytes"
	"strings"

	"golang.org/x/net/http2/hpack"

	"github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/http2"
)

// h2 masks one half of an HTTP/2 stream in wire/http2's recorded form
// (proto "http2" or "grpc"): header rules on its header and trailer
// fields, the regex rules on every field value (:path with its query's
// form fields too, as an HTTP/1 request line), and the data: an http2
// body as an HTTP/1 body (decoded by its content-encoding, JSON, forms,
// regex), gRPC messages by the regex rules where that keeps each
// message's length (a protobuf field's length prefix would be wrong
// otherwise; such a message is kept and counted as skipped). The half is
// written again with its DATA length fixed.
func (r *maskRun) h2(proto string, p []byte) []byte {
	m, pace, err := http2.ParseMessage(p)
	if err != nil {
		r.skip("an HTTP/2 stream half not in the recorded form: " + err.Error())
		return p
	}
	changed := false
	fields := func(fs []hpack.HeaderField) []hpack.HeaderField { // (ParseMessage's own)
		for i, f := range fs {
			v := f.Value
			if repl, ok := r.m.headers[f.Name]; ok && !strings.HasPrefix(f.Name, ":") {
				v = repl
			}
			if f.Name == ":path" {
				if q := strings.IndexByte(v, '?'); q >= 0 && (len(r.m.forms) > 0 || len(r.m.regexes) > 0) {
					v = v[:q+1] + string(r.m.maskForm([]byte(v[q+1:])))
				}
			}
			v = string(r.m.regex([]byte(v)))
			v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v) // a field value holds no line break
			if v != f.Value {
				fs[i].Value, changed = v, true
			}
		}
		return fs
	}
	for i := range m.Interim {
		m.Interim[i] = fields(m.Interim[i])
	}
	m.Header = fields(m.Header)
	if m.Trailer != nil {
		m.Trailer = fields(m.Trailer)
	}
	if len(m.Data) > 0 {
		var data []byte
		if proto == http2.GRPCName {
			data = r.grpcData(m.Data)
		} else {
			h := httpHead{contentLength: -1}
			h.contentType, _ = http2.Get(m.Header, "content-type")
			h.encoding, _ = http2.Get(m.Header, "content-encoding")
			h.contentType, h.encoding = strings.ToLower(h.contentType), strings.ToLower(h.encoding)
			data = r.body(m.Data, &h)
		}
		if !bytes.Equal(data, m.Data) {
			m.Data, changed = data, true
		}
	}
	if !changed {
		return p
	}
	return http2.AppendMessage(nil, m, pace)
}

// grpcData applies the regex rules to each gRPC message of data.
func (r *maskRun) grpcData(data []byte) []byte {
	if len(r.m.regexes) == 0 {
		return data
	}
	msgs, rest, err := grpc.Split(data, 0)
	if err != nil {
		r.skip("gRPC messages: " + err.Error())
		return data
	}
	var out []byte
	for _, msg := range msgs {
		masked := r.m.regex(msg.Data)
		if len(masked) != len(msg.Data) {
			r.skip("a gRPC message that a regex rule would change in length (protobuf lengths would be wrong)")
			masked = msg.Data
		}
		out = grpc.Append(out, grpc.Message{Compressed: msg.Compressed, Data: masked})
	}
	return append(out, rest...)
}
