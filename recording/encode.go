package recording

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"
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
		return appendText(b, p)
	}
	b = append(b, `_b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string, as appendText does (which only
// reads the bytes it is given: the view of s is not copied).
func appendString(b []byte, s string) []byte {
	return appendText(b, unsafe.Slice(unsafe.StringData(s), len(s)))
}

// appendText writes s as a JSON string: quotes, backslashes and control
// characters escaped, U+2028 and U+2029 escaped as encoding/json does,
// invalid UTF-8 replaced by U+FFFD.
//
// Recorded payloads are runs of a few plain bytes between escapes (the CR
// LF of protocol lines, the NULs of binary lengths), so the loop neither
// calls nor appends per run: it copies eight bytes at a time into spare
// capacity, tests them as one word, and moves on by the length of the
// plain run they start with. b[:j] is the output so far and b is kept at
// its full capacity, with len(b)-j >= len(s)-i+8 throughout: room for the
// rest of s as plain bytes and for the word written past them. A plain
// byte takes one byte out; an escape, which takes more, first makes room
// for 16 more (it writes at most 6 bytes for 1 to 4 read).
func appendText(b, s []byte) []byte {
	b = append(b, '"')
	j := len(b)
	b = slices.Grow(b, len(s)+16)
	b = b[:cap(b)]
	for i := 0; i < len(s); {
		for len(s)-i >= 8 {
			w := binary.LittleEndian.Uint64(s[i : i+8])
			binary.LittleEndian.PutUint64(b[j:j+8], w)
			if m := special(w); m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				i += k
				j += k
				break
			}
			i += 8
			j += 8
		}
		if len(s)-i < 8 {
			for i < len(s) && jsonPlain[s[i]] {
				b[j] = s[i]
				i++
				j++
			}
			if i == len(s) {
				break
			}
		}
		// s[i] needs more than a copy
		if len(b)-j < len(s)-i+16 {
			b = slices.Grow(b[:j], len(s)-i+16)
			b = b[:cap(b)]
		}
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch c {
			case '"', '\\':
				b[j], b[j+1] = '\\', c
			case '\n':
				b[j], b[j+1] = '\\', 'n'
			case '\r':
				b[j], b[j+1] = '\\', 'r'
			case '\t':
				b[j], b[j+1] = '\\', 't'
			default:
				b[j], b[j+1], b[j+2], b[j+3] = '\\', 'u', '0', '0'
				b[j+4], b[j+5] = hexDigits[c>>4], hexDigits[c&0xf]
				j += 4
			}
			j += 2
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			j += copy(b[j:], `\ufffd`)
		case r == '\u2028' || r == '\u2029':
			j += copy(b[j:], `\u202`)
			b[j] = hexDigits[r&0xf]
			j++
		default:
			j += copy(b[j:], s[i:i+size])
		}
		i += size
	}
	return append(b[:j], '"')
}

// special sets the high bit of each byte of w (eight bytes of text, the
// first in the low bits) that a JSON string cannot hold as it is: below
// 0x20, '"', '\\', or 0x80 and above (the start or middle of a character
// that must be checked). With the high bits cleared no byte can carry into
// the next, so each byte's bit is exact.
func special(w uint64) uint64 {
	const lows, highs = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	t := w & lows
	// the high bit of a byte of t+0x60 is set from 0x20 up; of x+0x7f,
	// where x is not 0
	ok := (t + 0x6060606060606060) & ((t ^ 0x2222222222222222) + lows) & ((t ^ 0x5c5c5c5c5c5c5c5c) + lows)
	return (^ok | w) & highs
}

// jsonPlain marks the bytes a JSON string holds as they are: ASCII from
// 0x20, but for '"' and '\\'.
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
