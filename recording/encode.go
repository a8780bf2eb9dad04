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

	fastbase64 "github.com/segmentio/asm/base64"
	fastutf8 "github.com/segmentio/asm/utf8"
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
	b = appendInt(b, int64(v))
	b = append(b, `,"id":`...)
	b = appendString(b, s.ID)
	if s.Trace != "" {
		b = append(b, `,"trace":`...)
		b = appendString(b, s.Trace)
	}
	if s.App != "" {
		b = append(b, `,"app":`...)
		b = appendString(b, s.App)
	}
	if s.Background {
		b = append(b, `,"background":true`...)
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
	b = appendTLS(b, &in.TLS)
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
	if r := s.Random; r != nil {
		b = appendRandom(b, r)
	}
	return append(b, '}'), true
}

// appendRandom writes the "random" member (session.go's Random).
func appendRandom(b []byte, r *Random) []byte {
	b = append(b, `,"random":{"seed":"`...)
	b = strconv.AppendUint(b, r.Seed, 10)
	b = append(b, `","math":`...)
	b = strconv.AppendUint(b, r.Math, 10)
	b = append(b, `,"math_v2":`...)
	b = strconv.AppendUint(b, r.MathV2, 10)
	if len(r.Crypto) > 0 {
		b = append(b, `,"crypto":[`...)
		for i, d := range r.Crypto {
			if i > 0 {
				b = append(b, ',')
			}
			if d == nil {
				b = append(b, "null"...)
				continue
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, d)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	if r.Masked {
		b = append(b, `,"masked":true`...)
	}
	return append(b, '}')
}

func appendCall(b []byte, c *Call) []byte {
	b = append(b, `{"seq":`...)
	b = appendInt(b, int64(c.Seq))
	b = append(b, `,"proto":`...)
	b = appendString(b, c.Proto)
	b = append(b, `,"dst":`...)
	b = appendString(b, c.Dst)
	if c.Host != "" {
		b = append(b, `,"host":`...)
		b = appendString(b, c.Host)
	}
	b = append(b, `,"setup":`...)
	b = strconv.AppendBool(b, c.Setup)
	if c.Conn != 0 {
		b = append(b, `,"conn":`...)
		b = appendInt(b, c.Conn)
	}
	b = appendTLS(b, &c.TLS)
	b = appendPayload(b, "request", c.Request)
	b = appendPayload(b, "response", c.Response)
	if c.Decoded != "" {
		b = append(b, `,"decoded":`...)
		b = appendString(b, c.Decoded)
	}
	if c.Note != "" {
		b = append(b, `,"call_note":`...)
		b = appendString(b, c.Note)
	}
	b = appendTail(b, c.StartNs, c.DurNs, c.RequestTruncated, c.ResponseTruncated)
	return append(b, '}')
}

// appendTLS writes the TLS fields that are set (session.go's TLS).
func appendTLS(b []byte, t *TLS) []byte {
	if t.On {
		b = append(b, `,"tls":true`...)
	}
	if t.ServerName != "" {
		b = append(b, `,"server_name":`...)
		b = appendString(b, t.ServerName)
	}
	if t.ALPN != "" {
		b = append(b, `,"alpn":`...)
		b = appendString(b, t.ALPN)
	}
	if t.Version != "" {
		b = append(b, `,"tls_version":`...)
		b = appendString(b, t.Version)
	}
	if t.CipherSuite != "" {
		b = append(b, `,"cipher_suite":`...)
		b = appendString(b, t.CipherSuite)
	}
	if t.Curve != "" {
		b = append(b, `,"curve":`...)
		b = appendString(b, t.Curve)
	}
	if t.Note != "" {
		b = append(b, `,"note":`...)
		b = appendString(b, t.Note)
	}
	return b
}

func appendTail(b []byte, start, dur int64, reqT, respT bool) []byte {
	b = append(b, `,"start_ns":`...)
	b = appendInt(b, start)
	b = append(b, `,"dur_ns":`...)
	b = appendInt(b, dur)
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
// The check and the base64 are segmentio/asm's: AVX2 code where the CPU has
// it (half the standard library's instructions on recorded
// payloads), the standard library's elsewhere.
func appendPayload(b []byte, name string, p []byte) []byte {
	if p == nil {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	if fastutf8.Valid(p) {
		b = append(b, '"', ':')
		return appendText(b, p)
	}
	b = append(b, `_b64":"`...)
	n := fastbase64.StdEncoding.EncodedLen(len(p))
	b = slices.Grow(b, n+1)
	fastbase64.StdEncoding.Encode(b[len(b):len(b)+n], p)
	b = b[:len(b)+n]
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendInt appends v in decimal, as strconv.AppendInt(b, v, 10) does. A
// session has about thirty numbers, most of them nanoseconds of seven to
// nine digits; this writes their digits in pairs straight into b, where
// strconv formats into a buffer of its own and copies it.
func appendInt(b []byte, v int64) []byte {
	u := uint64(v)
	if v < 0 {
		b = append(b, '-')
		u = -u
	}
	if u < 10 {
		return append(b, byte('0'+u))
	}
	n := decimalLen(u)
	b = slices.Grow(b, n)
	out := b[len(b) : len(b)+n]
	i := n
	for u >= 100 {
		q := u / 100
		d := (u - q*100) * 2
		out[i-1], out[i-2] = digitPairs[d+1], digitPairs[d]
		i -= 2
		u = q
	}
	if u >= 10 {
		out[1], out[0] = digitPairs[u*2+1], digitPairs[u*2]
	} else {
		out[0] = byte('0' + u)
	}
	return b[:len(b)+n]
}

// decimalLen is the number of decimal digits of u (u > 0).
func decimalLen(u uint64) int {
	// log10(2) ~ 1233/4096: an estimate from the bit length, then one
	// comparison with the power of ten it may have reached
	n := (bits.Len64(u) * 1233) >> 12
	if n < len(pow10) && u >= pow10[n] {
		n++
	}
	return n
}

var pow10 = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// appendString writes s as a JSON string, as appendText does (which only
// reads the bytes it is given: the view of s is not copied).
func appendString(b []byte, s string) []byte {
	return appendText(b, unsafe.Slice(unsafe.StringData(s), len(s)))
}

// appendText writes s as a JSON string: quotes, backslashes and control
// characters escaped, U+2028 and U+2029 escaped as encoding/json does,
// invalid UTF-8 replaced by U+FFFD.
//
// Recorded payloads are runs of plain bytes between escapes, often short
// ones (the CR LF of protocol lines, the NULs of binary lengths). The loop
// copies eight bytes at a time into spare capacity and tests them as one
// word. From the first byte that needs more, it takes the next eight
// bytes (or the string's last ones) through textEscapes, whose entry for a
// byte is what the string holds for it, written as one word whatever its
// length: no branch per byte. Only characters from 0x80 go one at a time.
//
// Words are read and written through in and out, unchecked: the loop runs
// once per eight bytes, and the bounds checks of slicing s and b were a
// third of its instructions. b[:j] is the output so far and b is kept at
// its full capacity, with len(b)-j >= n-i+8 throughout: room for the rest
// of s as plain bytes and for the word written past them. Before bytes go
// through the table there is room for 40 more (eight bytes of up to six
// each), and before a character from 0x80 for 8 more (it writes at most 6
// bytes for 1 to 4 read).
func appendText(b, s []byte) []byte {
	b = append(b, '"')
	j := len(b)
	b = slices.Grow(b, len(s)+8)
	b = b[:cap(b)]
	n := len(s)
	in, out := unsafe.Pointer(unsafe.SliceData(s)), unsafe.Pointer(unsafe.SliceData(b))
	for i := 0; i < n; {
		for n-i >= 8 {
			w := load8(in, i)
			store8(out, j, w)
			m := special(w)
			if m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				i += k
				j += k
				break
			}
			i += 8
			j += 8
		}
		if i == n {
			break
		}
		if len(b)-j < n-i+48 {
			b = slices.Grow(b[:j], n-i+48)
			b = b[:cap(b)]
			out = unsafe.Pointer(unsafe.SliceData(b))
		}
		if r := n - i; r < 8 && n >= 8 {
			// the last r bytes, from the word that ends with them: written
			// in one piece when none needs more, else through the table
			// when all are below 0x80
			w, sh := load8(in, n-8), uint(64-8*r)
			if special(w)>>sh == 0 {
				store8(out, j, w>>sh)
				j += r
				break
			}
			if w >>= sh; w&0x8080808080808080 == 0 {
				for range r {
					j = putText(out, j, byte(w))
					w >>= 8
				}
				break
			}
		} else if n-i >= 8 {
			if w := load8(in, i); w&0x8080808080808080 == 0 {
				// eight bytes below 0x80: no branch per byte
				j = putText(out, j, byte(w))
				j = putText(out, j, byte(w>>8))
				j = putText(out, j, byte(w>>16))
				j = putText(out, j, byte(w>>24))
				j = putText(out, j, byte(w>>32))
				j = putText(out, j, byte(w>>40))
				j = putText(out, j, byte(w>>48))
				j = putText(out, j, byte(w>>56))
				i += 8
				continue
			}
		}
		for e := min(i+8, n); i < e; i++ {
			x := textEscapes[*(*byte)(unsafe.Add(in, i))]
			if x == 0 {
				break
			}
			store8(out, j, x)
			j += int(x >> 56)
		}
		if i == n || s[i] < utf8.RuneSelf {
			continue
		}
		if len(b)-j < n-i+16 {
			b = slices.Grow(b[:j], n-i+16)
			b = b[:cap(b)]
			out = unsafe.Pointer(unsafe.SliceData(b))
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

// load8 reads the eight bytes at p+i as a little-endian word; store8
// writes w there. The caller has checked that they are in bounds.
func load8(p unsafe.Pointer, i int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, i))[:])
}

func store8(p unsafe.Pointer, i int, w uint64) {
	binary.LittleEndian.PutUint64((*[8]byte)(unsafe.Add(p, i))[:], w)
}

// putText writes what a JSON string holds for c, below 0x80, at out+j
// and returns where it ends. There must be room for 8 bytes at out+j.
func putText(out unsafe.Pointer, j int, c byte) int {
	e := textEscapes[c]
	store8(out, j, e)
	return j + int(e>>56)
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

// textEscapes holds, for each byte below 0x80, what a JSON string holds
// for it (the byte itself, or its escape of 2 or 6 bytes) in its low bytes,
// first byte lowest, and their count in its top byte. Bytes from 0x80 are
// 0: they start or continue a character, which appendText checks.
var textEscapes = func() (t [256]uint64) {
	for c := range utf8.RuneSelf {
		out := string(rune(c))
		switch c {
		case '"', '\\':
			out = `\` + out
		case '\n':
			out = `\n`
		case '\r':
			out = `\r`
		case '\t':
			out = `\t`
		default:
			if c < 0x20 {
				out = `\u00` + hexDigits[c>>4:c>>4+1] + hexDigits[c&0xf:c&0xf+1]
			}
		}
		for k := range len(out) {
			t[c] |= uint64(out[k]) << (8 * k)
		}
		t[c] |= uint64(len(out)) << 56
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
