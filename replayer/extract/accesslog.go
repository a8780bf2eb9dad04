package extract

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/replayer/load"
)

// accessTimeLayout is the time format of the common and combined formats.
const accessTimeLayout = "02/Jan/2006:15:04:05 -0700"

// ParseAccessLine parses one line of the NCSA common or combined log format
// (nginx's default "combined", Apache's "common" and "combined"):
//
//	127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326 "http://ref/" "Mozilla/4.08"
//
// The referer and user agent become headers when present; fields after them
// (nginx configurations often append some) are ignored.
func ParseAccessLine(line []byte, name string, lineNo int) (*load.Request, error) {
	s := string(line)
	// host ident user: three space-separated fields before the bracket.
	open := strings.IndexByte(s, '[')
	if open < 0 {
		return nil, errors.New("no [time] field")
	}
	if len(strings.Fields(s[:open])) < 3 {
		return nil, errors.New("want host, ident and user before [time]")
	}
	end := strings.IndexByte(s[open:], ']')
	if end < 0 {
		return nil, errors.New("unterminated [time] field")
	}
	at, err := time.Parse(accessTimeLayout, s[open+1:open+end])
	if err != nil {
		return nil, fmt.Errorf("bad time %q (want %s)", s[open+1:open+end], accessTimeLayout)
	}
	rest := strings.TrimLeft(s[open+end+1:], " ")
	reqLine, rest, err := quoted(rest)
	if err != nil {
		return nil, fmt.Errorf("request field: %w", err)
	}
	parts := strings.Fields(reqLine)
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("request %q is not \"METHOD URI PROTOCOL\"", reqLine)
	}
	if !strings.HasPrefix(parts[1], "/") && !strings.Contains(parts[1], "://") {
		return nil, fmt.Errorf("request URI %q is neither a path nor an absolute URL", parts[1])
	}
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		return nil, errors.New("want status and size after the request")
	}
	req := &load.Request{At: at, ID: fmt.Sprintf("%s:%d", name, lineNo), Kind: load.KindHTTP,
		Method: parts[0], URL: parts[1]}
	// Optional combined fields: "referer" "user-agent".
	rest = skipFields(rest, 2)
	if strings.HasPrefix(rest, `"`) {
		ref, after, err := quoted(rest)
		if err != nil {
			return nil, fmt.Errorf("referer field: %w", err)
		}
		ua, _, err := quoted(strings.TrimLeft(after, " "))
		if err != nil {
			return nil, fmt.Errorf("user-agent field: %w", err)
		}
		if ref != "-" && ref != "" {
			req.Header = map[string][]string{"Referer": {ref}}
		}
		if ua != "-" && ua != "" {
			if req.Header == nil {
				req.Header = map[string][]string{}
			}
			req.Header["User-Agent"] = []string{ua}
		}
	}
	return req, nil
}

// quoted reads a double-quoted field at the start of s, with \" and \\
// escapes (nginx writes \x22 for a quote, which needs no special case), and
// returns its content and what follows.
func quoted(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", errors.New("missing opening quote")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("missing closing quote")
}

// skipFields drops n space-separated fields from the start of s and the
// spaces after them.
func skipFields(s string, n int) string {
	for range n {
		s = strings.TrimLeft(s, " ")
		if i := strings.IndexByte(s, ' '); i >= 0 {
			s = s[i:]
		} else {
			s = ""
		}
	}
	return strings.TrimLeft(s, " ")
}
