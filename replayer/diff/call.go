package diff

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// CompareCalls compares the request bytes of a downstream call the replay
// made (got) with the recorded call it matched (want), under the rules that
// apply to api in the downstream scope and to destination dst. Any
// protocol compares field by field by its decoded form (see
// CompareDecoded), paths those of the form's fields: the protocol's
// wire.Comparer form when it has one, else its Decode. So:
//
//   - "http": method, target, headers and body (JSON structurally);
//     paths "method", "target", "header.X", "body…"
//   - "redis": the command arguments; paths "args[i]", or "cmd[n].args[i]"
//     for pipelines
//   - "mysql": per command "command", "sql" (white space collapsed),
//     "stmt_id", "params[i]" (an execute's values) or "params" (its
//     bytes), "bytes" (other commands); "packet[n].…" for several
//     (statement closes and quits are not compared)
//   - "postgres": each statement run or prepared, "sql" (or "sql[i]"),
//     every bound parameter decoded by type, "params[j]", COPY data,
//     "copy" (statement names are the connection's own)
//   - gRPC and HTTP/2 (wire/http2): "method", "path", "header.x",
//     "message[0].…"
//   - raw bytes, or bytes that do not parse: path "bytes", where they
//     first differ
func (r *Rules) CompareCalls(api, proto, dst string, want, got []byte) []Difference {
	if bytes.Equal(want, got) {
		return nil
	}
	c := &collector{v: r.view(api, ScopeDownstream, dst)}
	if p, ok := protocols.All.Lookup(proto); ok && p != protocols.All.Fallback() {
		if w, ok := compareForm(p, want); ok {
			if g, ok := compareForm(p, got); ok {
				c.decoded(unflatten(w.Fields), unflatten(g.Fields))
				return c.result()
			}
		}
	}
	c.bytes(want, got)
	return c.result()
}

// compareForm is the form a protocol's client message is compared in.
func compareForm(p wire.Protocol, msg []byte) (wire.Decoded, bool) {
	if cp, ok := p.(wire.Comparer); ok {
		return cp.CompareForm(msg)
	}
	return p.Decode(wire.Client, msg)
}

// bytes reports where two opaque payloads first differ.
func (c *collector) bytes(want, got []byte) { c.bytesAt("bytes", want, got) }

func (c *collector) bytesAt(name string, want, got []byte) {
	c.push(keySeg(name))
	defer c.pop()
	if c.v.ignored(c.path) {
		return
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(0, i-16)
	cut := func(b []byte) []byte {
		if from >= len(b) {
			return nil
		}
		return b[from:min(len(b), from+64)]
	}
	c.add(Changed, strconv.Quote(string(cut(want))), strconv.Quote(string(cut(got))),
		fmt.Sprintf("first difference at byte %d; %d vs %d bytes", i, len(want), len(got)))
}

// Insignificant reports whether a downstream request carries nothing to
// compare: its protocol's compare form has no field (MySQL packets that
// only close statements or the connection, a PostgreSQL Close and Sync).
// A recorded call like that which a replay never made is not a
// difference.
func Insignificant(proto string, req []byte) bool {
	p, ok := protocols.All.Lookup(proto)
	if !ok {
		return false
	}
	cp, ok := p.(wire.Comparer)
	if !ok {
		return false
	}
	d, ok := cp.CompareForm(req)
	return ok && len(d.Fields) == 0
}
