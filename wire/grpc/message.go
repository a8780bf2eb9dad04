package grpc

import (
	"encoding/binary"
	"fmt"
	"net/url"
	"strconv"

	"golang.org/x/net/http2/hpack"
)

// Message is one length-prefixed gRPC message.
type Message struct {
	// Compressed: the flag byte was 1; Data is then in the stream's
	// grpc-encoding.
	Compressed bool
	Data       []byte
}

// prefixLen is the flag byte and the 4-byte big-endian length.
const prefixLen = 5

// Split cuts a stream's data into its messages. rest is an incomplete
// message at the end (a stream still in progress); a bad flag byte or a
// message longer than max (0: no bound) is an error naming its offset.
func Split(data []byte, max int) (msgs []Message, rest []byte, err error) {
	off := 0
	for len(data)-off >= prefixLen {
		flag := data[off]
		if flag > 1 {
			return msgs, data[off:], fmt.Errorf("grpc: message at offset %d has compressed flag %d (want 0 or 1)", off, flag)
		}
		n := binary.BigEndian.Uint32(data[off+1:])
		if max > 0 && n > uint32(max) {
			return msgs, data[off:], fmt.Errorf("grpc: message at offset %d of %d bytes, more than the limit of %d", off, n, max)
		}
		if uint64(len(data)-off-prefixLen) < uint64(n) {
			break
		}
		start := off + prefixLen
		msgs = append(msgs, Message{Compressed: flag == 1, Data: data[start : start+int(n)]})
		off = start + int(n)
	}
	return msgs, data[off:], nil
}

// Append appends m with its prefix.
func Append(b []byte, m Message) []byte {
	flag := byte(0)
	if m.Compressed {
		flag = 1
	}
	b = append(b, flag)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Data)))
	return append(b, m.Data...)
}

// Status is a call's outcome, from its trailers (or the header block of a
// trailers-only response).
type Status struct {
	Code    int    `json:"code"`
	Message string `json:"message,omitempty"`
}

// StatusOf returns the status a response carries (in its trailer, or in
// the header block of a trailers-only response), and false when it
// carries none (the call did not end, or the server is not gRPC). A
// grpc-status that is not a number is an error.
func StatusOf(header, trailer []hpack.HeaderField) (Status, bool, error) {
	block := trailer
	if block == nil {
		block = header
	}
	v, ok := get(block, "grpc-status")
	if !ok {
		return Status{}, false, nil
	}
	code, err := strconv.Atoi(v)
	if err != nil || code < 0 {
		return Status{}, false, fmt.Errorf("grpc: grpc-status %q is not a status code", v)
	}
	msg, _ := get(block, "grpc-message")
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m // percent-encoded on the wire; kept as sent if malformed
	}
	return Status{Code: code, Message: msg}, true, nil
}

func get(fields []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// Metadata returns a header block's fields that are the call's metadata:
// everything but pseudo-headers and the fields HTTP/2 and gRPC themselves
// use.
func Metadata(block []hpack.HeaderField) []hpack.HeaderField {
	var md []hpack.HeaderField
	for _, f := range block {
		if f.IsPseudo() || reserved[f.Name] {
			continue
		}
		md = append(md, f)
	}
	return md
}

var reserved = map[string]bool{
	"content-type": true, "te": true, "user-agent": true, "grpc-timeout": true,
	"grpc-encoding": true, "grpc-accept-encoding": true, "grpc-status": true,
	"grpc-message": true, "grpc-status-details-bin": true, "content-length": true,
}
