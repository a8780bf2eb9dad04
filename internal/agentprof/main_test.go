package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// build makes a CPU profile of samples, each a stack (leaf first) and its
// milliseconds.
func build(samples ...sample) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     int64(10 * time.Millisecond),
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	for _, s := range samples {
		var ls []*profile.Location
		for _, name := range s.stack {
			loc, ok := locs[name]
			if !ok {
				f := &profile.Function{ID: uint64(len(funcs) + 1), Name: name}
				funcs[name] = f
				p.Function = append(p.Function, f)
				loc = &profile.Location{ID: uint64(len(locs) + 1), Line: []profile.Line{{Function: f}}}
				locs[name] = loc
				p.Location = append(p.Location, loc)
			}
			ls = append(ls, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: ls, Value: []int64{1, int64(s.ms) * int64(time.Millisecond)}})
	}
	return p
}

type sample struct {
	ms    int
	stack []string
}

const (
	connWrite = "github.com/retrace-dev/retrace/hook.connWrite"
	recordOut = "github.com/retrace-dev/retrace/recording/capture.(*Recorder).OutboundWrite"
	fdWrite   = "net.(*netFD).Write"
	handler   = "github.com/retrace-dev/retrace/recording/capture_test.(*fanOut).ServeHTTP"
)

func TestClassify(t *testing.T) {
	p := build(
		// the recorder, called by the hook: the agent's
		sample{30, []string{"runtime.mallocgc", recordOut, connWrite, "mysql.writePacket", handler}},
		// the write itself, under the hook: the application's
		sample{50, []string{"syscall.write", fdWrite, connWrite, "mysql.writePacket", handler}},
		// stack growth triggered by the hook's frame: counted apart
		sample{20, []string{"runtime.copystack", "runtime.newstack", connWrite, handler}},
		// stack growth in the application: not the agent's
		sample{10, []string{"runtime.copystack", "runtime.newstack", "strings.LastIndex", handler}},
		// the recorder's own file writes: the agent's
		sample{10, []string{"syscall.write", "internal/poll.(*FD).Write", "os.(*File).Write",
			"github.com/retrace-dev/retrace/recording.(*DirStore).Write", "github.com/retrace-dev/retrace/recording.(*pipelineWriter).run"}},
		// the test's service is the application, not the agent
		sample{40, []string{"encoding/json.Marshal", handler, "net/http.(*conn).serve"}},
	)
	c := classify(p, 2)
	require.Equal(t, 160*time.Millisecond, c.total)
	require.Equal(t, 40*time.Millisecond, c.agent)
	require.Equal(t, 20*time.Millisecond, c.agentGrowth)
	require.Equal(t, 30*time.Millisecond, c.growth)
	require.Equal(t, map[string]time.Duration{
		"hook.connWrite > recording/capture.(*Recorder).OutboundWrite":  30 * time.Millisecond,
		"recording.(*pipelineWriter).run > recording.(*DirStore).Write": 10 * time.Millisecond,
	}, c.paths)
}

func TestReportFromDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, p *profile.Profile) {
		f, err := os.Create(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NoError(t, p.Write(f))
		require.NoError(t, f.Close())
	}
	app := sample{100, []string{"syscall.write", fdWrite, "net.(*conn).Write", handler}}
	write("off-0.prof", build(app))
	write("off-1.prof", build(app))
	write("100-0.prof", build(app, sample{30, []string{recordOut, connWrite, handler}}))
	write("100-1.prof", build(app, sample{10, []string{recordOut, connWrite, handler}}, sample{20, []string{"runtime.gcBgMarkWorker"}}))

	modes, err := load(dir)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, report(&out, modes, 5, 3))
	got := out.String()
	for _, want := range []string{
		"== 100: 0.26s of CPU, 0.06s more than off (30.0%)",
		"agent's own code and what it calls: 0.04s (15.4% of the mode's CPU)",
		"stack growth: 0.00s more than off (0.00s against 0.00s; 0.00s of it under the agent's frames)",
		"indirect (the rest of the extra CPU): 0.02s",
		"0.04s  hook.connWrite > recording/capture.(*Recorder).OutboundWrite",
		"== off: 0.20s of CPU",
	} {
		require.True(t, strings.Contains(got, want), "missing %q in:\n%s", want, got)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	_, err := load(dir)
	require.ErrorContains(t, err, "no *.prof files")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "off-0.prof"), []byte("not a profile"), 0o644))
	_, err = load(dir)
	require.ErrorContains(t, err, "off-0.prof")

	require.NoError(t, os.Remove(filepath.Join(dir, "off-0.prof")))
	f, err := os.Create(filepath.Join(dir, "100-0.prof"))
	require.NoError(t, err)
	require.NoError(t, build(sample{10, []string{connWrite}}).Write(f))
	require.NoError(t, f.Close())
	modes, err := load(dir)
	require.NoError(t, err)
	require.ErrorContains(t, report(&bytes.Buffer{}, modes, 1, 1), `no profiles of the mode "off"`)
}
