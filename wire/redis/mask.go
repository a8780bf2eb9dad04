// Masking: the values of RESP messages, for the masking rules a
// wire.MaskRules carries.

package redis

import (
	"bytes"
	"strconv"

	"github.com/retrace-dev/retrace/wire"
)

// Mask applies the rules' patterns to every string of a recorded RESP2 or
// RESP3 stream, commands or replies (command arguments, simple and bulk
// strings, verbatim strings, errors) and fixes the length of every bulk
// string that changed; aggregates and numbers are copied. An inline
// command's line is masked as text. What does not parse as RESP (a payload
// cut by the cap) gets the patterns as raw bytes from where it stops.
func (protocol) Mask(_ wire.Side, msg []byte, rules wire.MaskRules) []byte {
	out := make([]byte, 0, len(msg))
	p := msg
	changed := false
	for len(p) > 0 {
		nl := bytes.Index(p, []byte("\r\n"))
		if nl < 1 {
			break
		}
		ln := p[:nl]
		switch ln[0] {
		case '$', '=', '!': // bulk string, verbatim string, bulk error
			n, err := strconv.Atoi(string(ln[1:]))
			if err != nil {
				return finish(msg, out, p, rules)
			}
			if n < 0 { // null bulk string
				out = append(out, p[:nl+2]...)
				p = p[nl+2:]
				continue
			}
			if len(p) < nl+2+n+2 || p[nl+2+n] != '\r' || p[nl+3+n] != '\n' {
				return finish(msg, out, p, rules)
			}
			v := p[nl+2 : nl+2+n]
			if mv := rules.Text(v); !bytes.Equal(mv, v) {
				changed = true
				out = append(strconv.AppendInt(append(out, ln[0]), int64(len(mv)), 10), "\r\n"...)
				out = append(append(out, mv...), "\r\n"...)
			} else {
				out = append(out, p[:nl+2+n+2]...)
			}
			p = p[nl+2+n+2:]
		case '+', '-':
			mv := rules.Text(ln[1:])
			changed = changed || !bytes.Equal(mv, ln[1:])
			out = append(append(append(out, ln[0]), mv...), "\r\n"...)
			p = p[nl+2:]
		case '*', '%', '~', '>', '|', ':', ',', '#', '(', '_':
			// aggregates and numbers: copied, their elements follow
			out = append(out, p[:nl+2]...)
			p = p[nl+2:]
		default: // an inline command
			mv := rules.Text(ln)
			changed = changed || !bytes.Equal(mv, ln)
			out = append(append(out, mv...), "\r\n"...)
			p = p[nl+2:]
		}
	}
	if len(p) > 0 {
		return finish(msg, out, p, rules)
	}
	if !changed {
		return msg
	}
	return out
}

// finish appends the rest of a stream that does not parse, masked as text.
func finish(msg, out, rest []byte, rules wire.MaskRules) []byte {
	out = append(out, rules.Text(rest)...)
	if bytes.Equal(out, msg) {
		return msg
	}
	return out
}
