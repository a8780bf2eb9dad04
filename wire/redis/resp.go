// RESP framing: client commands and server replies.

package redis

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// ErrProtocol reports bytes that are not RESP.
var ErrProtocol = errors.New("redis: protocol error")

// maxDepth bounds the nesting of aggregate replies.
const maxDepth = 32

// line returns the length of the CRLF-terminated line at the start of b
// (without CRLF), or -1 when it is not complete.
func line(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		if i == 0 {
			return -2
		}
		return -1
	}
	return i - 1
}

func parseInt(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 19 {
		return 0, fmt.Errorf("%w: bad length %q", ErrProtocol, b)
	}
	if n, ok := plainDigits(b); ok { // the usual case
		return n, nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: bad length %q", ErrProtocol, b)
	}
	return n, nil
}

// plainDigits parses b when it is at most 18 decimal digits (no sign), which
// cannot overflow.
func plainDigits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// ParseCommand parses the client command at the start of b and returns its
// arguments (aliasing b) and the bytes it occupies. n is 0 and err nil when b
// holds only part of a command. maxLen bounds a single argument.
func ParseCommand(b []byte, maxLen int) (args [][]byte, n int, err error) {
	return AppendCommand(nil, b, maxLen)
}

// AppendCommand is ParseCommand appending the arguments to dst, so a caller
// parsing many commands can reuse one slice.
func AppendCommand(dst [][]byte, b []byte, maxLen int) (args [][]byte, n int, err error) {
	if len(b) == 0 {
		return nil, 0, nil
	}
	if b[0] != '*' {
		return parseInline(b, maxLen)
	}
	l := line(b)
	if l == -2 {
		return nil, 0, fmt.Errorf("%w: bare LF", ErrProtocol)
	}
	if l < 0 {
		if len(b) > 32 {
			return nil, 0, fmt.Errorf("%w: array header too long", ErrProtocol)
		}
		return nil, 0, nil
	}
	count, err := parseInt(b[1:l])
	if err != nil {
		return nil, 0, err
	}
	if count < 1 || count > 1<<20 {
		return nil, 0, fmt.Errorf("%w: command of %d arguments", ErrProtocol, count)
	}
	p := l + 2
	// Each argument needs at least 6 bytes ($0\r\n\r\n): never allocate more
	// than the bytes at hand could hold.
	args = dst
	if args == nil {
		args = make([][]byte, 0, min(int(count), (len(b)-p)/6+1))
	}
	for range count {
		if p >= len(b) {
			return nil, 0, nil
		}
		if b[p] != '$' {
			return nil, 0, fmt.Errorf("%w: expected bulk string at byte %d, got %q", ErrProtocol, p, b[p])
		}
		l := line(b[p:])
		if l == -2 {
			return nil, 0, fmt.Errorf("%w: bare LF", ErrProtocol)
		}
		if l < 0 {
			if len(b)-p > 32 {
				return nil, 0, fmt.Errorf("%w: bulk header too long", ErrProtocol)
			}
			return nil, 0, nil
		}
		sz, err := parseInt(b[p+1 : p+l])
		if err != nil {
			return nil, 0, err
		}
		if sz < 0 || sz > int64(maxLen) {
			return nil, 0, fmt.Errorf("%w: argument of %d bytes", ErrProtocol, sz)
		}
		p += l + 2
		if len(b)-p < int(sz)+2 {
			return nil, 0, nil
		}
		if b[p+int(sz)] != '\r' || b[p+int(sz)+1] != '\n' {
			return nil, 0, fmt.Errorf("%w: bulk string not followed by CRLF at byte %d", ErrProtocol, p+int(sz))
		}
		args = append(args, b[p:p+int(sz)])
		p += int(sz) + 2
	}
	return args, p, nil
}

func parseInline(b []byte, maxLen int) ([][]byte, int, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > maxLen {
			return nil, 0, fmt.Errorf("%w: inline command longer than %d bytes", ErrProtocol, maxLen)
		}
		return nil, 0, nil
	}
	ln := b[:i]
	if len(ln) > 0 && ln[len(ln)-1] == '\r' {
		ln = ln[:len(ln)-1]
	}
	args := bytes.Fields(ln)
	if len(args) == 0 {
		return nil, 0, fmt.Errorf("%w: empty inline command", ErrProtocol)
	}
	return args, i + 1, nil
}

// ReplyLen returns the length of the server reply (any RESP2 or RESP3 value,
// attributes and pushes included) at the start of b; 0 when it is not
// complete.
func ReplyLen(b []byte) (int, error) {
	return valueLen(b, 0)
}

func valueLen(b []byte, depth int) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if depth > maxDepth {
		return 0, fmt.Errorf("%w: replies nested deeper than %d", ErrProtocol, maxDepth)
	}
	l := line(b)
	if l == -2 {
		return 0, fmt.Errorf("%w: bare LF", ErrProtocol)
	}
	if l < 0 {
		if b[0] == '$' || b[0] == '*' || b[0] == '%' || b[0] == '~' || b[0] == '>' || b[0] == '|' || b[0] == '!' || b[0] == '=' {
			if len(b) > 32 {
				return 0, fmt.Errorf("%w: header too long", ErrProtocol)
			}
		}
		return 0, nil
	}
	switch b[0] {
	case '+', '-', ':', ',', '#', '(', '_':
		return l + 2, nil
	case '$', '!', '=':
		sz, err := parseInt(b[1:l])
		if err != nil {
			return 0, err
		}
		if sz == -1 && b[0] == '$' {
			return l + 2, nil
		}
		if sz < 0 {
			return 0, fmt.Errorf("%w: negative length %d", ErrProtocol, sz)
		}
		end := int64(l+2) + sz + 2
		if end > int64(len(b)) {
			return 0, nil
		}
		if b[end-2] != '\r' || b[end-1] != '\n' {
			return 0, fmt.Errorf("%w: blob not followed by CRLF", ErrProtocol)
		}
		return int(end), nil
	case '*', '~', '>', '%', '|':
		count, err := parseInt(b[1:l])
		if err != nil {
			return 0, err
		}
		if count == -1 && b[0] == '*' {
			return l + 2, nil
		}
		if count < 0 {
			return 0, fmt.Errorf("%w: negative count %d", ErrProtocol, count)
		}
		if b[0] == '%' || b[0] == '|' {
			count *= 2
		}
		p := l + 2
		for range count {
			n, err := valueLen(b[p:], depth+1)
			if err != nil || n == 0 {
				return 0, err
			}
			p += n
		}
		if b[0] == '|' { // an attribute precedes the value it describes
			n, err := valueLen(b[p:], depth+1)
			if err != nil || n == 0 {
				return 0, err
			}
			p += n
		}
		return p, nil
	}
	return 0, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, b[0])
}
