package hook_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
)

// TestReplayTime: with Retrace-Replay-Time, time.Now on the request's
// goroutine and its children is the recorded time plus the time elapsed
// since the request arrived; other requests and goroutines see the real
// clock.
func TestReplayTime(t *testing.T) {
	addr := startByteServer(t, 4096)
	install(t, hook.Config{Mode: hook.Replay, MockAddr: "127.0.0.1:9", Passthrough: []string{addr}, Logger: discardLogger()})
	rc, err := agenttest.DialRaw(addr)
	require.NoError(t, err)
	defer rc.Close()
	recorded := time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC)

	get := func(headers ...string) (seenRequest, time.Duration) {
		t0 := time.Now()
		_, raw, err := rc.Get("/t", headers...)
		require.NoError(t, err)
		elapsed := time.Since(t0)
		var sr seenRequest
		require.NoError(t, json.Unmarshal(raw, &sr))
		return sr, elapsed
	}

	t0 := time.Now()
	sr, took := get("Retrace-Trace-Id: "+agenttest.NewID(), "Retrace-Replay-Time: "+strconv.FormatInt(recorded.UnixNano(), 10))
	for _, got := range []time.Time{sr.Now, sr.ChildNow} {
		require.False(t, got.Before(recorded), "mocked clock %v before the recorded time %v", got, recorded)
		require.False(t, got.After(recorded.Add(took)), "mocked clock %v more than %v after the recorded time", got, took)
	}
	require.False(t, sr.ChildNow.Before(sr.Now))

	// Untraced request, and the test's own goroutine: the real clock.
	sr, _ = get()
	t1 := time.Now()
	for _, got := range []time.Time{sr.Now, sr.ChildNow} {
		require.False(t, got.Before(t0) || got.After(t1), "real clock %v outside [%v, %v]", got, t0, t1)
	}
	// A Time from the patched time.Now keeps its monotonic reading.
	require.Contains(t, time.Now().String(), "m=+")
}
