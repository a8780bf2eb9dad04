package http2

import (
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Message is one side's half of a stream.
type Message struct {
	// Interim holds informational (1xx) response header blocks.
	Interim [][]hpack.HeaderField `json:"interim,omitempty"`
	// Header is the first header block (request headers, or the final
	// response headers). A gRPC trailers-only response has only this one,
	// ended.
	Header []hpack.HeaderField `json:"header,omitempty"`
	// Data is the concatenated payload of the DATA frames.
	Data []byte `json:"data,omitempty"`
	// Trailer is the header block that ended the half after data, if any.
	Trailer []hpack.HeaderField `json:"trailer,omitempty"`
	// End: END_STREAM was seen.
	End bool `json:"end,omitempty"`
	// Truncated: data beyond the reader's limit was dropped (Conn.Truncate).
	Truncated bool `json:"truncated,omitempty"`
	// Dropped counts the data bytes not kept in Data (Conn.KeepData).
	Dropped int `json:"dropped,omitempty"`
}

// Get returns the value of the first field named name in the header block
// (names are lower case in HTTP/2), and whether there was one.
func Get(fields []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// Exchange is one stream: a request and its response.
type Exchange struct {
	StreamID uint32  `json:"stream"`
	Request  Message `json:"request"`
	Response Message `json:"response"`
	// Promised: a server push (PUSH_PROMISE) whose request the server wrote.
	Promised bool `json:"promised,omitempty"`
	// Reset, when not nil, is the RST_STREAM that ended the stream.
	Reset *Reset `json:"reset,omitempty"`
	// Pace says how the response's data followed the request's: at each
	// point the server sent data, how many request data bytes it had
	// received. A mock replays a streaming call by it (a bidirectional
	// call answering each message as it comes). Kept only when the
	// directions were fed in the order the bytes went (a recorder's
	// hooks report reads after they happen and writes before).
	Pace []Mark `json:"pace,omitempty"`
	// Unfinished says why a stream was handed over before both halves
	// ended (a GOAWAY, the connection's end, an error): empty for a
	// finished one.
	Unfinished string `json:"unfinished,omitempty"`

	bounded bool // Conn.KeepData bounds the data kept, to keep bytes per half
	keep    int
}

// Mark is a point of an exchange: the server had sent Response bytes of
// data once it had received Request bytes of the request's data.
type Mark struct {
	Request  int `json:"req"`
	Response int `json:"resp"`
}

// mark notes that the response's data grew.
func (x *Exchange) mark() {
	m := Mark{Request: len(x.Request.Data) + x.Request.Dropped, Response: len(x.Response.Data) + x.Response.Dropped}
	if n := len(x.Pace); n > 0 && x.Pace[n-1].Request == m.Request {
		x.Pace[n-1] = m
		return
	}
	x.Pace = append(x.Pace, m)
}

// Reset is an RST_STREAM and who sent it.
type Reset struct {
	By   Side          `json:"by"`
	Code http2.ErrCode `json:"code"`
}

// Method, Path and Authority are the request's pseudo-headers.
func (x *Exchange) Method() string { v, _ := Get(x.Request.Header, ":method"); return v }

// Path is the request's :path.
func (x *Exchange) Path() string { v, _ := Get(x.Request.Header, ":path"); return v }

// Status is the final response's :status ("" before it).
func (x *Exchange) Status() string { v, _ := Get(x.Response.Header, ":status"); return v }

// IsGRPC reports a request whose content-type is application/grpc (any
// subtype).
func (x *Exchange) IsGRPC() bool {
	ct, _ := Get(x.Request.Header, "content-type")
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
}

// done reports whether nothing more can happen on the stream.
func (x *Exchange) done() bool {
	return x.Reset != nil || (x.Request.End && x.Response.End)
}

// addHeaders files a header block in the half it belongs to.
func (m *Message) addHeaders(fields []hpack.HeaderField, response bool) {
	switch {
	case m.Header == nil && response && isInterim(fields):
		m.Interim = append(m.Interim, fields)
	case m.Header == nil:
		m.Header = fields
	default:
		m.Trailer = fields
	}
}

func isInterim(fields []hpack.HeaderField) bool {
	s, _ := Get(fields, ":status")
	return len(s) == 3 && s[0] == '1'
}

// Due is how many bytes of the recorded response's data a mock may have
// sent once it has received received bytes of the request's data (all of
// them once ended): what Pace allows, or everything when the request has
// ended or the recording has no pace.
func (x *Exchange) Due(received int, ended bool) int {
	if ended || len(x.Pace) == 0 {
		return len(x.Response.Data)
	}
	due := 0
	for _, m := range x.Pace {
		if m.Request > received {
			break
		}
		due = m.Response
	}
	return due
}
