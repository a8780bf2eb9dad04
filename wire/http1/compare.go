package http1

import (
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/wire"
)

var _ wire.Comparer = protocol{}

// CompareForm is what the downstream diff compares of a request: "method",
// "target", "header.<Canonical-Name>" (the values of a repeated header
// joined with ", "; the codings' own headers left out) and "body" with
// its transfer and content codings removed.
func (protocol) CompareForm(msg []byte) (wire.Decoded, bool) {
	r, err := ParseRequest(msg)
	if err != nil {
		return wire.Decoded{}, false
	}
	d := wire.Decoded{Text: r.Method + " " + r.Target}
	d.Fields = append(d.Fields, wire.Field{Path: "method", Value: r.Method}, wire.Field{Path: "target", Value: r.Target})
	names := make([]string, 0, len(r.Header))
	for k := range r.Header {
		names = append(names, http.CanonicalHeaderKey(k))
	}
	sort.Strings(names)
	for _, k := range names {
		path := "header." + k
		if strings.ContainsAny(k, ".[]") {
			path = "header[" + strconv.Quote(k) + "]"
		}
		d.Fields = append(d.Fields, wire.Field{Path: path, Value: strings.Join(r.Header.Values(k), ", ")})
	}
	if len(r.Body) > 0 {
		d.Fields = append(d.Fields, wire.Field{Path: "body", Value: string(r.Body)})
	}
	return d, true
}
