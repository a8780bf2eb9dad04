package regress

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
)

// NoiseConfig says how noise is detected.
type NoiseConfig struct {
	// PerAPI is how many sessions of each API are replayed; zero: 3.
	PerAPI int
	// Runs is how many times each of them is replayed against the same
	// build; zero: 2. Values that differ between any two runs are noise.
	Runs int
}

// Noise is what noise detection found.
type Noise struct {
	// Rules ignore every path that differed between runs, per API (and
	// per destination downstream), array indices generalised to [*].
	Rules    []diff.Rule
	Sessions int // sessions replayed
	Errors   int // replays that failed (not used for detection)
	// Unstable lists sessions whose status code differed between runs:
	// never turned into a rule, since ignoring the status would hide
	// failures.
	Unstable []string
}

// maxUnstable bounds Noise.Unstable.
const maxUnstable = 100

// DetectNoise replays a sample of the selected sessions several times
// against the same build (and, in A/B mode, against the baseline too) and
// returns rules that ignore what differed between those replays:
// timestamps, generated ids, random order. The rules in cfg.Rules apply
// already, so what they ignore is not reported again.
func DetectNoise(ctx context.Context, cfg Config, nc NoiseConfig) (*Noise, error) {
	if nc.PerAPI <= 0 {
		nc.PerAPI = 3
	}
	if nc.Runs < 2 {
		nc.Runs = 2
	}
	r, err := newRunner(&cfg)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.preflight(ctx); err != nil {
		return nil, err
	}
	perAPI := map[string]int{} // bounded by the number of APIs
	pick := func(s *recording.Session) int {
		method, path := RequestLine(s.Inbound.Request)
		api := APIName(method, path)
		if perAPI[api] >= nc.PerAPI {
			return 0
		}
		perAPI[api]++
		return 1
	}
	out := &Noise{}
	seen := map[string]bool{}
	emit := func(p noiseProbe) {
		out.Sessions++
		out.Errors += p.errors
		if p.unstable && len(out.Unstable) < maxUnstable {
			out.Unstable = append(out.Unstable, p.session)
		}
		for _, rule := range p.rules {
			k := rule.API + "\x00" + rule.Scope + "\x00" + rule.Dst + "\x00" + rule.Ignore
			if !seen[k] {
				seen[k] = true
				out.Rules = append(out.Rules, rule)
			}
		}
	}
	err = runPool(ctx, r, pick, func(ctx context.Context, w *worker, j job) noiseProbe {
		return r.probe(ctx, w, j.s, nc.Runs)
	}, emit)
	sort.SliceStable(out.Rules, func(i, j int) bool {
		a, b := out.Rules[i], out.Rules[j]
		if a.API != b.API {
			return a.API < b.API
		}
		if a.Scope != b.Scope {
			return a.Scope > b.Scope // response first
		}
		if a.Dst != b.Dst {
			return a.Dst < b.Dst
		}
		return a.Ignore < b.Ignore
	})
	return out, err
}

// noiseProbe is what the replays of one session showed.
type noiseProbe struct {
	session  string
	rules    []diff.Rule
	errors   int
	unstable bool
}

func (r *runner) probe(ctx context.Context, w *worker, s *recording.Session, runs int) noiseProbe {
	p := noiseProbe{session: s.ID}
	method, path := RequestLine(s.Inbound.Request)
	api := APIName(method, path)
	comment := fmt.Sprintf("noise: differed between %d replays of session %s", runs, s.ID)
	var h2rec *h2Recorded
	if isH2(s) {
		rec, err := r.readH2(s)
		if err != nil {
			p.errors++
			return p
		}
		h2rec = rec
	}
	sides := []*side{r.candidate}
	if r.baseline != nil {
		sides = append(sides, r.baseline)
	}
	for _, sd := range sides {
		var first *attempt
		for k := 0; k < runs; k++ {
			a := r.replay(ctx, w, sd, s, k, "n"+sd.name[:1])
			if a.err == nil && h2rec != nil {
				a.err = r.decodeReplayed(h2rec, &a)
			}
			if a.err != nil {
				p.errors++
				continue
			}
			if first == nil {
				first = &a
				continue
			}
			var ds []diff.Difference
			if h2rec != nil {
				if h2Status(a.h2dec) != h2Status(first.h2dec) {
					p.unstable = true
				}
				ds = r.cfg.Rules.CompareDecoded(api, diff.ScopeResponse, "", *first.h2dec, *a.h2dec)
			} else {
				if a.resp.Status != first.resp.Status {
					p.unstable = true
				}
				ds = r.cfg.Rules.CompareResponses(api, first.resp, a.resp)
			}
			for _, d := range ds {
				if d.Path == "status" || d.Path == "grpc-status" || d.Path == "…" {
					continue
				}
				p.rules = append(p.rules, diff.Rule{API: api, Scope: diff.ScopeResponse, Ignore: noisePath(d.Path), Comment: comment})
			}
			if first.report != nil && a.report != nil {
				p.rules = append(p.rules, r.downstreamNoise(api, s, first, &a, comment)...)
			}
		}
	}
	return p
}

// downstreamNoise judges the downstream calls of two replays against the
// recording, the way a run does, and returns rules for the paths whose
// differences are not the same in both: a value that changes between two
// replays of one build. Calls made or skipped in one replay only are not
// turned into rules: they fail the session, where a reviewer sees them.
func (r *runner) downstreamNoise(api string, s *recording.Session, a, b *attempt, comment string) []diff.Rule {
	type key struct{ dst, path, kind, got string }
	keys := func(at *attempt) map[key]bool {
		fs, _ := downstream(r.cfg.Rules, r.cfg.Schema, api, s, at.report)
		m := make(map[key]bool, len(fs))
		for _, f := range fs {
			if f.Call != nil && f.Path != "call" && f.Path != "…" {
				m[key{f.Call.Dst, f.Path, string(f.Kind), f.Got}] = true
			}
		}
		return m
	}
	ka, kb := keys(a), keys(b)
	var out []diff.Rule
	for _, pair := range [2][2]map[key]bool{{ka, kb}, {kb, ka}} {
		for k := range pair[0] {
			if !pair[1][k] {
				out = append(out, diff.Rule{API: api, Scope: diff.ScopeDownstream, Dst: k.dst, Ignore: noisePath(k.path), Comment: comment})
			}
		}
	}
	return out
}

// noisePath is the path a noise rule ignores. Array indices inside a JSON
// body are generalised (a timestamp at items[3].ts is noise at every
// index); positions elsewhere mean something — the fourth SQL parameter,
// the third argument of a Redis command — and are kept.
func noisePath(p string) string {
	if p == "body" || strings.HasPrefix(p, "body.") || strings.HasPrefix(p, "body[") {
		return diff.Generalize(p)
	}
	// Inside a gRPC message: which message is kept, indices within it
	// are generalised.
	if q, ok := strings.CutPrefix(p, "message["); ok {
		if i := strings.Index(q, "]."); i > 0 {
			return "message[" + q[:i] + "]." + diff.Generalize(q[i+2:])
		}
	}
	return p
}
