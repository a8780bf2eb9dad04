package http2

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/grpc"
	"github.com/retrace-dev/retrace/wire/protobuf"
)

// The decoded form of a stream's half (wire.Decoded), the paths the diff
// reports and the reports highlight:
//
//	method, path            the request's :method and :path
//	status                  the response's :status
//	header.<name>           a field of the header block (lower case;
//	                        other pseudo-headers keep their colon:
//	                        header.:authority)
//	message[i].<field>      the i-th gRPC message, protobuf decoded by
//	                        field number (message[0].1.2) or, with a
//	                        schema, by field name (message[0].item.sku);
//	                        an empty message is the leaf message[i] = {}
//	body                    the data of a stream that is not gRPC: text,
//	                        or "base64:…" for binary
//	trailer.<name>          a field of the trailer block
//	grpc-status             the status code (from the trailer, or the
//	                        header block of a trailers-only response)
//	grpc-message            the status message, percent-decoding undone
//	interim[i]              the :status of an informational block
//
// grpc-status and grpc-message are not repeated as header or trailer
// fields. Keys that are not plain identifiers are quoted: message[0]["a.b"].

// Decode shows a recorded half: its start line, its fields, and its data —
// gRPC messages by protobuf field number, anything else as text. A half
// that does not parse, or whose gRPC messages do not decode, is false.
func (protocol) Decode(side wire.Side, msg []byte) (wire.Decoded, bool) {
	m, _, err := ParseMessage(msg)
	if err != nil {
		return wire.Decoded{}, false
	}
	d, err := DecodeChecked(side == wire.Server, m, nil, "")
	return d, err == nil
}

// DecodeMessage is Decode with an optional schema and the call's path, by
// which gRPC messages are shown by field name. What does not decode is
// shown as a field saying why (see DecodeChecked).
func DecodeMessage(response bool, m Message, s protobuf.Schema, path string) wire.Decoded {
	d, _ := DecodeChecked(response, m, s, path)
	return d
}

// ErrUndecodable marks a half whose content does not decode: a gRPC
// message that is not protobuf (or not of the schema's type), data that is
// not whole length-prefixed messages, a compressed message in an encoding
// other than gzip, a grpc-status that is not a number.
var ErrUndecodable = errors.New("http2: undecodable")

// DecodeChecked is DecodeMessage that also says what did not decode: the
// error (wrapping ErrUndecodable) names the first such part; d shows
// everything, the parts that did not decode as a field saying why. A
// schema that does not know the method at path is no error: its messages
// are decoded by field number.
func DecodeChecked(response bool, m Message, s protobuf.Schema, path string) (wire.Decoded, error) {
	dc := decoder{response: response, schema: s}
	if p, ok := Get(m.Header, ":path"); ok && path == "" {
		path = p
	}
	dc.path = path
	return dc.decode(m)
}

type decoder struct {
	response bool
	schema   protobuf.Schema
	path     string
	d        wire.Decoded
	err      error
}

func (dc *decoder) field(path, value string) {
	dc.d.Fields = append(dc.d.Fields, wire.Field{Path: path, Value: value})
}

func (dc *decoder) fail(path, why string) {
	dc.field(path, "(not decoded: "+why+")")
	if dc.err == nil {
		dc.err = fmt.Errorf("%w: %s: %s", ErrUndecodable, path, why)
	}
}

func (dc *decoder) decode(m Message) (wire.Decoded, error) {
	var line []string
	for i, h := range m.Interim {
		st, _ := Get(h, ":status")
		dc.field("interim["+strconv.Itoa(i)+"]", st)
	}
	status, statusOK, statusErr := grpc.StatusOf(m.Header, m.Trailer)
	trailersOnly := m.Trailer == nil && statusOK
	for _, f := range m.Header {
		switch {
		case f.Name == ":method":
			dc.field("method", f.Value)
			line = append(line, f.Value)
		case f.Name == ":path":
			dc.field("path", f.Value)
			line = append(line, f.Value)
		case f.Name == ":status":
			dc.field("status", f.Value)
			line = append(line, f.Value)
		case trailersOnly && (f.Name == "grpc-status" || f.Name == "grpc-message"):
		default:
			dc.field(joinKey("header", f.Name), f.Value)
		}
	}
	ct, _ := Get(m.Header, "content-type")
	switch {
	case strings.HasPrefix(ct, "application/grpc"):
		enc, _ := Get(m.Header, "grpc-encoding")
		msgs, rest, err := grpc.Split(m.Data, 0)
		for i, gm := range msgs {
			dc.message("message["+strconv.Itoa(i)+"]", gm, enc)
		}
		switch {
		case err != nil:
			dc.fail("data", err.Error())
		case len(rest) > 0:
			dc.fail("data", fmt.Sprintf("%d bytes after the last whole message", len(rest)))
		}
		line = append(line, plural(len(msgs), "message"))
	case len(m.Data) > 0:
		if utf8.Valid(m.Data) {
			dc.field("body", string(m.Data))
		} else {
			dc.field("body", "base64:"+base64.StdEncoding.EncodeToString(m.Data))
		}
		line = append(line, plural(len(m.Data), "byte"))
	}
	for _, f := range m.Trailer {
		if f.Name == "grpc-status" || f.Name == "grpc-message" {
			continue
		}
		dc.field(joinKey("trailer", f.Name), f.Value)
	}
	switch {
	case statusErr != nil:
		dc.fail("grpc-status", statusErr.Error())
	case statusOK:
		dc.field("grpc-status", strconv.Itoa(status.Code))
		if status.Message != "" {
			dc.field("grpc-message", status.Message)
		}
		l := "grpc-status " + strconv.Itoa(status.Code)
		if status.Message != "" {
			l += " " + status.Message
		}
		line = append(line, l)
	}
	dc.d.Text = strings.Join(line, " ")
	return dc.d, dc.err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// maxInflated bounds a gzip-compressed message once inflated.
const maxInflated = 64 << 20

// message decodes one gRPC message: by the schema's type of the method
// when it has one, else by field number.
func (dc *decoder) message(prefix string, gm grpc.Message, enc string) {
	data := gm.Data
	if gm.Compressed {
		if enc != "gzip" {
			dc.fail(prefix, fmt.Sprintf("%d bytes compressed with grpc-encoding %q", len(gm.Data), enc))
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(gm.Data))
		if err == nil {
			data, err = io.ReadAll(io.LimitReader(zr, maxInflated+1))
		}
		if err != nil || len(data) > maxInflated {
			dc.fail(prefix, fmt.Sprintf("%d bytes of gzip that do not inflate", len(gm.Data)))
			return
		}
	}
	var tree map[string]any
	var err error
	known := false
	if dc.schema != nil {
		tree, known, err = dc.schema.DecodeMethod(dc.path, dc.response, data)
	}
	if !known {
		tree, err = protobuf.DecodeRaw(data)
	}
	if err != nil {
		dc.fail(prefix, fmt.Sprintf("%d bytes, not protobuf: %v", len(data), err))
		return
	}
	if len(tree) == 0 {
		dc.field(prefix, "{}")
		return
	}
	flatten(prefix, tree, &dc.d.Fields)
}

// flatten lists a decoded tree's leaves by path, keys in order; an empty
// object or list is a leaf ({} or []).
func flatten(path string, v any, out *[]wire.Field) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			*out = append(*out, wire.Field{Path: path, Value: "{}"})
			return
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return fieldLess(keys[i], keys[j]) })
		for _, k := range keys {
			flatten(joinKey(path, k), t[k], out)
		}
	case []any:
		if len(t) == 0 {
			*out = append(*out, wire.Field{Path: path, Value: "[]"})
			return
		}
		for i, e := range t {
			flatten(path+"["+strconv.Itoa(i)+"]", e, out)
		}
	case string:
		*out = append(*out, wire.Field{Path: path, Value: t})
	default:
		b, _ := json.Marshal(t)
		*out = append(*out, wire.Field{Path: path, Value: string(b)})
	}
}

// fieldLess orders field numbers numerically, names as strings, numbers
// first.
func fieldLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return x < y
	case errA == nil:
		return true
	case errB == nil:
		return false
	}
	return a < b
}

// joinKey appends key to path in the syntax of the diff's paths: after a
// dot when it is a plain identifier, else quoted in brackets.
func joinKey(path, key string) string {
	plain := key != "" && key != "*" && key != "**" && !strings.ContainsAny(key, ".[]\" \t\r\n")
	switch {
	case plain && path == "":
		return key
	case plain:
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// volatile are the request header fields whose value is the moment's, not
// the request's: grpc-go sends a call's remaining deadline as grpc-timeout,
// different on every run.
var volatile = map[string]bool{"header.grpc-timeout": true}

// Comparable returns d without the fields that differ between two sends of
// the same request (volatile): what the downstream diff compares of a
// recorded and a replayed stream.
func Comparable(d wire.Decoded) wire.Decoded {
	out := wire.Decoded{Text: d.Text, Fields: make([]wire.Field, 0, len(d.Fields))}
	for _, f := range d.Fields {
		if !volatile[f.Path] {
			out.Fields = append(out.Fields, f)
		}
	}
	return out
}
