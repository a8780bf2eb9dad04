// Command agentprof says where record mode's CPU goes, from the CPU
// profiles BenchmarkFanOutRatio writes with CAPTURE_BENCH_PROFILES=DIR
// (one file per service process, named MODE-BLOCK.prof: off-0.prof,
// 100-2.prof, …):
//
//	go run ./internal/agentprof DIR...
//	go run ./internal/agentprof -paths 20 -depth 4 DIR...
//
// Several directories (several runs) are merged.
//
// For each mode it prints the CPU the profiles hold and, against the mode
// "off" (the same requests with the agent off), how much more; then the
// part of it spent in the agent's own code and what that code calls, and
// the rest ("indirect": the kernel, the scheduler, the collector, caches).
// A sample is the agent's when its outermost frame of the agent's packages
// has no original work under it: the netFD's reads and writes, and
// net/http's round trip, are the application's own whether or not a hook
// called them (the recorder's writes to its files are the agent's). Stack growth (runtime.newstack) is counted apart, wherever
// it happens: goroutines grow with or without the agent, and the agent's
// frames mostly move the place where they do; what the agent adds is the
// difference with the mode "off".
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

func main() {
	paths := flag.Int("paths", 12, "how many of the agent's call paths to list per mode")
	depth := flag.Int("depth", 3, "how many agent frames name a path")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: agentprof [-paths N] [-depth D] DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	modes, err := load(flag.Args()...)
	if err == nil {
		err = report(os.Stdout, modes, *paths, *depth)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentprof:", err)
		os.Exit(1)
	}
}

// load merges the profiles of the directories by mode (the file name up to
// its last "-").
func load(dirs ...string) (map[string]*profile.Profile, error) {
	var files []string
	for _, dir := range dirs {
		fs, err := filepath.Glob(filepath.Join(dir, "*.prof"))
		if err != nil {
			return nil, err
		}
		if len(fs) == 0 {
			return nil, fmt.Errorf("%s: no *.prof files (run BenchmarkFanOutRatio with CAPTURE_BENCH_PROFILES=%s)", dir, dir)
		}
		files = append(files, fs...)
	}
	byMode := map[string][]*profile.Profile{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".prof")
		i := strings.LastIndex(name, "-")
		if i <= 0 {
			return nil, fmt.Errorf("%s: not named MODE-BLOCK.prof", f)
		}
		p, err := readProfile(f)
		if err != nil {
			return nil, err
		}
		byMode[name[:i]] = append(byMode[name[:i]], p)
	}
	modes := map[string]*profile.Profile{}
	for m, ps := range byMode {
		p, err := profile.Merge(ps)
		if err != nil {
			return nil, fmt.Errorf("merging the %q profiles: %w", m, err)
		}
		modes[m] = p
	}
	return modes, nil
}

func readProfile(path string) (*profile.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cpuIndex(p) < 0 {
		return nil, fmt.Errorf("%s: not a CPU profile", path)
	}
	return p, nil
}

// cpuIndex is the index of the profile's cpu/nanoseconds sample value.
func cpuIndex(p *profile.Profile) int {
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			return i
		}
	}
	return -1
}

var (
	// agentFunc matches the functions of the agent's packages (not their
	// tests, whose services are the application).
	agentFunc = regexp.MustCompile(`^github\.com/retrace-dev/retrace/(hook|trace|goid|recording)(/[a-z]+)*\.`)
	testFunc  = regexp.MustCompile(`_test\.`)
	// originalFunc matches the application's own work that hooks call
	// (not internal/poll, which the recorder's file writes go through
	// too).
	originalFunc = regexp.MustCompile(`^(net\.\(\*netFD\)\.(Read|Write|Close)|net/http\.\(\*Transport\)\.roundTrip)$`)
)

// cost is one mode's CPU, split as the package comment says.
type cost struct {
	total, agent, agentGrowth, growth time.Duration
	paths                             map[string]time.Duration
}

// classify splits p's CPU; depth agent frames (outermost first) name a
// path.
func classify(p *profile.Profile, depth int) cost {
	c := cost{paths: map[string]time.Duration{}}
	vi := cpuIndex(p)
	for _, s := range p.Sample {
		d := time.Duration(s.Value[vi])
		c.total += d
		var funcs []string // leaf first
		for _, loc := range s.Location {
			// inlined functions come first in a location's lines
			for _, ln := range loc.Line {
				if ln.Function != nil {
					funcs = append(funcs, ln.Function.Name)
				}
			}
		}
		outer, growth := -1, -1
		for i, f := range funcs {
			if agentFunc.MatchString(f) && !testFunc.MatchString(f) {
				outer = i
			}
			if f == "runtime.newstack" && growth < 0 {
				growth = i
			}
		}
		if growth >= 0 {
			c.growth += d
		}
		if outer < 0 {
			continue
		}
		original := false
		for _, f := range funcs[:outer] {
			if originalFunc.MatchString(f) {
				original = true
				break
			}
		}
		if original {
			continue
		}
		if growth >= 0 && growth < outer {
			c.agentGrowth += d
			continue
		}
		c.agent += d
		var chain []string
		for i := outer; i >= 0 && len(chain) < depth; i-- {
			if agentFunc.MatchString(funcs[i]) {
				chain = append(chain, strings.TrimPrefix(funcs[i], "github.com/retrace-dev/retrace/"))
			}
		}
		c.paths[strings.Join(chain, " > ")] += d
	}
	return c
}

func report(w io.Writer, modes map[string]*profile.Profile, npaths, depth int) error {
	off, ok := modes["off"]
	if !ok {
		return errors.New(`no profiles of the mode "off" to compare with`)
	}
	base := classify(off, depth)
	names := make([]string, 0, len(modes))
	for m := range modes {
		names = append(names, m)
	}
	sort.Strings(names)
	sec := func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
	pct := func(d, of time.Duration) string {
		if of == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*d.Seconds()/of.Seconds())
	}
	for _, m := range names {
		c := classify(modes[m], depth)
		fmt.Fprintf(w, "== %s: %s of CPU", m, sec(c.total))
		if m == "off" {
			fmt.Fprintf(w, "; stack growth %s\n", sec(c.growth))
			continue
		}
		extra := c.total - base.total
		fmt.Fprintf(w, ", %s more than off (%s)\n", sec(extra), pct(extra, base.total))
		growth := c.growth - base.growth
		fmt.Fprintf(w, "   agent's own code and what it calls: %s (%s of the mode's CPU)\n", sec(c.agent), pct(c.agent, c.total))
		fmt.Fprintf(w, "   stack growth: %s more than off (%s against %s; %s of it under the agent's frames)\n",
			sec(growth), sec(c.growth), sec(base.growth), sec(c.agentGrowth))
		fmt.Fprintf(w, "   indirect (the rest of the extra CPU): %s\n", sec(extra-c.agent-growth))
		type kv struct {
			k string
			v time.Duration
		}
		var ps []kv
		for k, v := range c.paths {
			ps = append(ps, kv{k, v})
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].v > ps[j].v || ps[i].v == ps[j].v && ps[i].k < ps[j].k })
		for i, p := range ps {
			if i == npaths {
				break
			}
			fmt.Fprintf(w, "   %7s  %s\n", sec(p.v), p.k)
		}
	}
	return nil
}
