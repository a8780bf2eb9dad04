package recording

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendSession appends the schema-v1 JSON of s to b. It writes what
// json.Marshal writes with the MarshalJSON methods of session.go (the same
// fields, order and omissions), except that it does not escape <, > and &
// in strings, so payloads stay greppable; it is several times faster,
// which matters for the recorder's background writer. ok is false for a
// time json.Marshal cannot encode (year outside 0–9999).
func appendSession(b []byte, s *Session) ([]byte, bool) {
	if y := s.At.Year(); y < 0 || y > 9999 {
		return b, false
	}
	v := s.V
	if v == 0 {
		v = SchemaVersion
	}
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(v), 10)
	b = append(b, `,"id":`...)
	b = appendString(b, s.ID)
	if s.App != "" {
		b = append(b, `,"app":`...)
		b = appendString(b, s.App)
	}
	b = append(b, `,"at":"`...)
	b = s.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","inbound":{"proto":`...)
	in := &s.Inbound
	b = appendString(b, in.Proto)
	if in.Local != "" {
		b = append(b, `,"local":`...)
		b = appendString(b, in.Local)
	}
	if in.Remote != "" {
		b = append(b, `,"remote":`...)
		b = appendString(b, in.Remote)
	}
	b = appendPayload(b, "request", in.Request)
	b = appendPayload(b, "response", in.Response)
	b = appendTail(b, in.StartNs, in.DurNs, in.RequestTruncated, in.ResponseTruncated)
	b = append(b, `},"calls":`...)
	if s.Calls == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range s.Calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCall(b, &s.Calls[i])
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

func appendCall(b []byte, c *Call) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, int64(c.Seq), 10)
	b = append(b, `,"proto":`...)
	b = appendString(b, c.Proto)
	b = append(b, `,"dst":`...)
	b = appendString(b, c.Dst)
	b = append(b, `,"setup":`...)
	b = strconv.AppendBool(b, c.Setup)
	if c.Conn != 0 {
		b = append(b, `,"conn":`...)
		b = strconv.AppendInt(b, c.Conn, 10)
	}
	b = appendPayload(b, "request", c.Request)
	b = appendPayload(b, "response", c.Response)
	b = appendTail(b, c.StartNs, c.DurNs, c.RequestTruncated, c.ResponseTruncated)
	return append(b, '}')
}

func appendTail(b []byte, start, dur int64, reqT, respT bool) []byte {
	b = append(b, `,"start_ns":`...)
	b = strconv.AppendInt(b, start, 10)
	b = append(b, `,"dur_ns":`...)
	b = strconv.AppendInt(b, dur, 10)
	if reqT {
		b = append(b, `,"request_truncated":true`...)
	}
	if respT {
		b = append(b, `,"response_truncated":true`...)
	}
	return b
}

// appendPayload writes a payload as a string when it is UTF-8 and as base64
// in the _b64 twin otherwise (session.go's splitPayload); nil is omitted.
func appendPayload(b []byte, name string, p []byte) []byte {
	if p == nil {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	if utf8.Valid(p) {
		b = append(b, '"', ':')
		return appendString(b, p)
	}
	b = append(b, `_b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: quotes, backslashes and control
// characters escaped, U+2028 and U+2029 escaped as encoding/json does,
// invalid UTF-8 replaced by U+FFFD.
func appendString[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jsonPlain marks the bytes a JSON string holds as they are: ASCII from
// 0x20, but for '"' and '\\' (one lookup per byte, where four comparisons
// were).
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// marshalSlow is Marshal through encoding/json, for what appendSession
// refuses.
func marshalSlow(s *Session) ([]byte, error) {
	if s.V == 0 {
		c := *s
		c.V = SchemaVersion
		s = &c
	}
	return json.Marshal(s)
}
