package mockserver

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// The TLS facts of recorded destinations (DESIGN.md 3.3, trace.TLSDst): a
// replaying agent completes a redirected client's TLS handshake without
// TLS, and asks here what the recordings say the destination's handshakes
// negotiated, so that the application's ConnectionState is the recorded
// one.

// maxTLSFacts bounds the distinct combinations kept per destination: a
// destination negotiates one or two (a client per ALPN, a server upgrade
// between recordings).
const maxTLSFacts = 16

// addTLS notes the handshake facts of a TLS call; the caller holds ix.mu.
func (ix *index) addTLS(c *recording.Call) {
	if !c.TLS.On {
		return
	}
	if ix.tls == nil {
		ix.tls = map[string][]trace.TLSFacts{}
	}
	f := trace.TLSFacts{ServerName: c.TLS.ServerName, ALPN: c.TLS.ALPN, Version: c.TLS.Version,
		CipherSuite: c.TLS.CipherSuite, Curve: c.TLS.Curve}
	ix.tls[c.Dst] = countFacts(ix.tls[c.Dst], f)
	if c.Host != "" && c.Host != c.Dst {
		ix.tls[c.Host] = countFacts(ix.tls[c.Host], f) // as dialled, as ix.dsts
	}
}

// countFacts adds one call of f to list.
func countFacts(list []trace.TLSFacts, f trace.TLSFacts) []trace.TLSFacts {
	for i := range list {
		if g := &list[i]; g.ServerName == f.ServerName && g.ALPN == f.ALPN && g.Version == f.Version &&
			g.CipherSuite == f.CipherSuite && g.Curve == f.Curve {
			g.Calls++
			return list
		}
	}
	if len(list) >= maxTLSFacts {
		return list
	}
	f.Calls = 1
	return append(list, f)
}

// tlsFacts answers q, asked for trace tid ("" for none): the recorded
// destination answering q.Dst as connections to it are answered (exact,
// mapped, decided), else the recorded TLS destination that fits best by
// server name, trace, port and name; its facts best fit first.
func (s *Server) tlsFacts(tid string, q *trace.TLSQuery) trace.TLSAnswer {
	if tid != "" {
		s.trace(s.ctx, tid) // loads the trace's recording, if it is not yet
	}
	rec := ""
	if d, ok := s.resolveFixed(q.Dst); ok && d.Recorded != "" {
		rec = d.Recorded
	}
	s.idx.mu.RLock()
	defer s.idx.mu.RUnlock()
	if rec == "" {
		var cands []candidate
		inTrace := s.traceDsts(tid)
		for dst, facts := range s.idx.tls {
			sc := portScore(q.Dst, dst) + nameScore(q.Dst, dst)
			if inTrace[dst] {
				sc += 4
			}
			if q.ServerName != "" && slices.ContainsFunc(facts, func(f trace.TLSFacts) bool { return f.ServerName == q.ServerName }) {
				sc += 4
			}
			cands = append(cands, candidate{dst, sc})
		}
		best, _ := bestCandidate(cands)
		rec = best.dst
	}
	facts := s.idx.tls[rec]
	if len(facts) == 0 {
		why := fmt.Sprintf("no recording holds a TLS call to %s", q.Dst)
		if rec != "" && rec != q.Dst {
			why = fmt.Sprintf("no recording holds a TLS call to %s (recorded destination %s)", q.Dst, rec)
		}
		return trace.TLSAnswer{Recorded: rec, Reason: why}
	}
	out := slices.Clone(facts)
	fit := func(f *trace.TLSFacts) int {
		n := 0
		if q.ServerName != "" && f.ServerName == q.ServerName {
			n += 2
		}
		if f.ALPN == "" || slices.Contains(q.ALPN, f.ALPN) {
			n++
		}
		return n
	}
	slices.SortStableFunc(out, func(a, b trace.TLSFacts) int {
		if c := cmp.Compare(fit(&b), fit(&a)); c != 0 {
			return c
		}
		return cmp.Compare(b.Calls, a.Calls)
	})
	return trace.TLSAnswer{Recorded: rec, Facts: out}
}

// serveTLS answers the TLS queries an agent sends on a connection named
// trace.TLSDst, one JSON line per frame.
func (c *conn) serveTLS() error {
	return serveQuestions(c, "TLS query", func(tid string, q *trace.TLSQuery) ([]byte, error) {
		a := c.s.tlsFacts(tid, q)
		if a.Reason != "" {
			c.s.log.Info("no recorded TLS state", "trace", tid, "dst", q.Dst, "reason", a.Reason)
		}
		return json.Marshal(a)
	})
}
