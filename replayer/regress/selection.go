package regress

import (
	"bytes"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
)

// Selection chooses which recorded sessions are replayed. The zero value
// selects every session.
type Selection struct {
	// APIs are globs ('*' any run, '?' one byte) matched against
	// "METHOD /path" (query left out) and against the API name (see
	// APIName); a session is selected when any glob matches. Empty: all.
	APIs []string
	// Since and Until bound the recording time (Session.At); zero: open.
	Since, Until time.Time
	// IDs selects sessions by id; empty: all.
	IDs map[string]bool
	// Sample is the fraction of sessions kept, in (0,1]; 0 keeps all. The
	// choice is a hash of Seed and the session id: the same seed picks the
	// same sessions from any source, in any order.
	Sample float64
	Seed   int64
	// Limit stops after this many selected sessions; 0: no limit.
	Limit int
}

// match reports whether s is selected (Limit is applied by the caller).
func (sel *Selection) match(s *recording.Session) bool {
	if s.Background {
		return false // no inbound request: start-up and background traffic, for the mock server
	}
	if len(sel.IDs) > 0 && !sel.IDs[s.ID] {
		return false
	}
	if !sel.Since.IsZero() && s.At.Before(sel.Since) {
		return false
	}
	if !sel.Until.IsZero() && !s.At.Before(sel.Until) {
		return false
	}
	if len(sel.APIs) > 0 {
		method, path := RequestLine(s.Inbound.Request)
		raw, name := method+" "+path, APIName(method, path)
		ok := false
		for _, g := range sel.APIs {
			if diff.Glob(g, raw) || diff.Glob(g, name) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if sel.Sample > 0 && sel.Sample < 1 {
		h := fnv.New64a()
		h.Write([]byte(strconv.FormatInt(sel.Seed, 10)))
		h.Write([]byte{0})
		h.Write([]byte(s.ID))
		if float64(h.Sum64()>>11)/float64(1<<53) >= sel.Sample {
			return false
		}
	}
	return true
}

// RequestLine returns the method and the path (without query) of a raw
// HTTP request; empty strings when the request line does not parse.
func RequestLine(raw []byte) (method, path string) {
	if m, p, ok := h2RequestLine(raw); ok { // an HTTP/2 or gRPC stream's request half
		if i := strings.IndexAny(p, "?#"); i >= 0 {
			p = p[:i]
		}
		return m, p
	}
	line := raw
	if i := bytes.IndexByte(raw, '\n'); i >= 0 {
		line = raw[:i]
	}
	f := strings.Fields(string(line))
	if len(f) < 2 {
		return "", ""
	}
	path = f[1]
	if i := strings.Index(path, "://"); i >= 0 { // absolute form
		rest := path[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			path = rest[j:]
		} else {
			path = "/"
		}
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	return f[0], path
}

// APIName names the API of a request for grouping; it is
// recording.APIName, shared with the load pipeline so both report the same
// API names.
func APIName(method, path string) string {
	if method == "" {
		return "(unparsed request)"
	}
	return recording.APIName(method, path)
}
