package http1

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/wire"
)

// Name is the protocol's name in recordings.
const Name = "http"

// Protocol is HTTP/1.x as a wire.Protocol.
var Protocol wire.Protocol = protocol{}

type protocol struct{}

func (protocol) Name() string { return Name }

// Detect is sure of a whole request line "METHOD SP target SP HTTP/1.0"
// (or 1.1) ending in CRLF, or of server bytes starting "HTTP/1." (the
// answer to a request read before its write was seen). A line like a raw
// protocol's "GET key tag\n" is not HTTP.
func (protocol) Detect(client, server []byte) wire.Verdict {
	if len(client) == 0 {
		if len(server) == 0 {
			return wire.NotYet
		}
		return detectResponse(server)
	}
	v := detectRequestLine(client)
	if v == wire.NotYet && len(server) > 0 {
		if detectResponse(server) == wire.Sure {
			return wire.Sure
		}
		return wire.No // the server answered what is not a request yet
	}
	return v
}

func detectResponse(b []byte) wire.Verdict {
	const prefix = "HTTP/1."
	n := min(len(b), len(prefix))
	if string(b[:n]) != prefix[:n] {
		return wire.No
	}
	if n < len(prefix) {
		return wire.NotYet
	}
	return wire.Sure
}

// detectRequestLine follows the request line at the start of b.
func detectRequestLine(b []byte) wire.Verdict {
	i := 0
	for i < len(b) && isTChar(b[i]) {
		i++
	}
	switch {
	case i == len(b):
		return wire.NotYet
	case i == 0 || b[i] != ' ' || i > 32:
		return wire.No
	}
	i++
	t := i
	for i < len(b) && b[i] > ' ' && b[i] < 0x7f {
		i++
	}
	switch {
	case i == len(b):
		return wire.NotYet
	case i == t || b[i] != ' ':
		return wire.No
	}
	i++
	rest := b[i:]
	const v = "HTTP/1."
	if len(rest) < len(v)+3 {
		full := v + "1\r\n"
		if !bytes.HasPrefix([]byte(full), rest) && !bytes.HasPrefix([]byte(v+"0\r\n"), rest) {
			return wire.No
		}
		return wire.NotYet
	}
	if !bytes.HasPrefix(rest, []byte(v)) || rest[len(v)] != '0' && rest[len(v)] != '1' ||
		rest[len(v)+1] != '\r' || rest[len(v)+2] != '\n' {
		return wire.No
	}
	return wire.Sure
}

func isTChar(c byte) bool { return tchar[c] }

// tchar marks the bytes of an HTTP token (RFC 9110 5.6.2).
var tchar = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = strings.IndexByte("()<>@,;:\\\"/[]?={}", byte(c)) < 0
	}
	return t
}()

func (protocol) NewFramer(side wire.Side, limit int) wire.Framer {
	return &framer{side: side, limit: limit}
}

// framer: requests by their head and body; responses by theirs, the
// methods of the requests they answer in order (a response that runs
// to the end of the connection is never whole).
type framer struct {
	side    wire.Side
	limit   int
	methods []string
}

func (f *framer) Next(buf []byte) (int, error) {
	var n int
	var err error
	if f.side == wire.Client {
		_, n, err = RequestLen(buf)
	} else {
		method := ""
		if len(f.methods) > 0 {
			method = f.methods[0]
		}
		var h Head
		h, n, err = ResponseLen(buf, method)
		if n < 0 {
			n = 0
		}
		if n > 0 && h.Status >= 200 && len(f.methods) > 0 {
			f.methods = f.methods[1:]
		}
	}
	if err == nil && n == 0 && len(buf) > f.limit {
		err = fmt.Errorf("%w: HTTP message of more than %d bytes", wire.ErrTooLong, f.limit)
	}
	return n, err
}

func (f *framer) Request(msg []byte) {
	if f.side == wire.Server {
		m, _, _ := strings.Cut(string(msg[:min(len(msg), 40)]), " ")
		f.methods = append(f.methods, m)
	}
}

// ---- capture ----

func (protocol) NewTap() wire.Tap { return &tap{} }

// tap follows the response of the connection's current call (HTTP/1
// clients do not pipeline: one exchange at a time).
type tap struct {
	resp Response
	tid  string
}

func (t *tap) Write(p []byte, tid string, begins bool) wire.Filing {
	f := wire.Filing{Trace: tid}
	if !begins {
		return f
	}
	if tid == t.tid && t.resp.AwaitingFinal() {
		f.Continue = true // a body sent after "100 Continue"
		return f
	}
	t.resp, t.tid = Response{NoBody: bytes.HasPrefix(p, []byte("HEAD "))}, tid
	// an exchange of no sampled request is not followed: its answer is
	// read before the connection's next request is written
	f.Skip = tid == ""
	return f
}

func (t *tap) Read(p []byte) bool {
	if t.resp.Done() {
		return false
	}
	t.resp.Feed(p)
	return true
}

func (t *tap) ReadsOnWriter() bool { return false }

// ---- mock server ----

func (protocol) NewBook() wire.Book { return wire.NoBook{} }

func (protocol) NewSession(wire.Book) wire.Session { return session{} }

type session struct{}

func (session) Units(c wire.Call) []wire.Unit {
	h, n, err := RequestLen(c.Request)
	if err != nil || n == 0 {
		return []wire.Unit{{Req: wire.Request{Raw: c.Request, Op: "?", Canon: c.Request, Body: c.Request}, Resp: c.Response}}
	}
	return []wire.Unit{{Req: Features(c.Request[:n], h, 64<<20), Resp: c.Response}}
}

// Features computes what matching knows of one complete request: its
// body decoded up to limit bytes.
func Features(msg []byte, h Head, limit int) wire.Request {
	body := Body(msg, h, limit)
	canon := make([]byte, 0, len(h.Method)+1+len(h.Target)+1+len(body))
	canon = append(append(append(append(append(canon, h.Method...), ' '), h.Target...), '\n'), body...)
	return wire.Request{Raw: msg, Op: h.Method + " " + NormalizePath(h.Target), Key: h.Target,
		Canon: canon, Body: body, Method: h.Method}
}

func (protocol) NewAnswerer(env wire.Env) wire.Answerer { return &answerer{max: env.MaxMessage} }

type answerer struct {
	max       int
	continued bool // 100 Continue sent for the request being assembled
	answered  bool // continued, for the request last returned by Next
}

func (a *answerer) Greeting() []byte { return nil }

func (a *answerer) Next(buf []byte) (wire.Request, int, []byte, error) {
	h, n, err := RequestLen(buf)
	if err != nil {
		return wire.Request{}, 0, nil, err
	}
	if n == 0 {
		if len(buf) > a.max {
			return wire.Request{}, 0, nil, fmt.Errorf("%w: HTTP request of more than %d bytes", wire.ErrTooLong, a.max)
		}
		if h.HeadLen > 0 && h.Expect100 && !a.continued {
			a.continued = true
			return wire.Request{}, 0, []byte(Continue), nil
		}
		return wire.Request{}, 0, nil, nil
	}
	r := Features(buf[:n], h, min(a.max, 4<<20)) // bounded gunzip for matching
	r.Quit = h.Close
	a.answered, a.continued = a.continued, false
	return r, n, nil, nil
}

func (a *answerer) Reply(_ *wire.Request, resp []byte) []byte {
	if a.answered {
		return StripContinue(resp)
	}
	return resp
}

func (a *answerer) Synth(r *wire.Request) []byte {
	return errorTo(r, "retrace: no recorded answer")
}

func (a *answerer) Missing(r *wire.Request, reason string) []byte {
	return errorTo(r, "retrace: "+reason)
}

// errorTo is the 502 answer to r: its head alone for HEAD, whose answer
// has no body (a body would be read as the start of the next response).
func errorTo(r *wire.Request, reason string) []byte {
	resp := ErrorResponse(502, reason)
	if r.Method == "HEAD" {
		if i := bytes.Index(resp, []byte("\r\n\r\n")); i >= 0 {
			resp = resp[:i+4]
		}
	}
	return resp
}

func (a *answerer) AnswerLen(r *wire.Request, b []byte) (int, error) {
	_, n, err := ResponseLen(b, r.Method)
	return n, err
}

// ---- decoded form ----

// Decode shows a message's start line, its headers but the framing ones,
// and its body with the transfer and gzip codings removed when that is
// text; fields "method", "target" (requests), "status" (responses),
// "header.<Name>" and "body".
func (protocol) Decode(side wire.Side, msg []byte) (wire.Decoded, bool) {
	h, err := ParseHead(msg, side == wire.Client)
	if err != nil || h.HeadLen == 0 {
		return wire.Decoded{}, false
	}
	var d wire.Decoded
	lines := strings.Split(string(msg[:h.HeadLen-4]), "\r\n")
	if side == wire.Client {
		d.Fields = append(d.Fields, wire.Field{Path: "method", Value: h.Method}, wire.Field{Path: "target", Value: h.Target})
	} else {
		d.Fields = append(d.Fields, wire.Field{Path: "status", Value: fmt.Sprint(h.Status)})
	}
	var text strings.Builder
	text.WriteString(lines[0])
	for _, ln := range lines[1:] {
		name, val, _ := strings.Cut(ln, ":")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		switch strings.ToLower(name) {
		case "content-length", "transfer-encoding", "content-encoding":
			continue
		}
		d.Fields = append(d.Fields, wire.Field{Path: "header." + name, Value: val})
		text.WriteString("\n" + name + ": " + val)
	}
	body := Body(msg, h, 1<<20)
	if len(body) > 0 {
		b := string(body)
		if !utf8.ValidString(b) {
			b = fmt.Sprintf("(%d bytes of binary)", len(body))
		}
		d.Fields = append(d.Fields, wire.Field{Path: "body", Value: b})
		text.WriteString("\n\n" + b)
	}
	d.Text = text.String()
	return d, true
}
