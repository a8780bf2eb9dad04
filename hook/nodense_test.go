package hook_test

import (
	"testing"

	"github.com/retrace-dev/retrace/hook"
)

// TestWithoutDenseIndex runs the concurrent tests again with connections
// found through the map, as on a Go release whose net.netFD has no padding
// for the dense index.
func TestWithoutDenseIndex(t *testing.T) {
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"RecordFanOut", TestRecordFanOut},
		{"ReplayFanOut", TestReplayFanOut},
		{"ConcurrentWritersAndClose", TestConcurrentWritersAndClose},
		{"UntracedSetupWrites", TestUntracedSetupWritesAreReported},
	} {
		t.Run(c.name, func(t *testing.T) {
			hook.NoDenseIndex(t)
			c.test(t)
		})
	}
}
