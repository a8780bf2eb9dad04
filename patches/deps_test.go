package patches

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The blank import links the agent and the directory store only: no store
// SDK, RPC framework or telemetry library comes with it (Redis and bucket
// stores are opt-in imports, recording/redisstore and recording/cloud), nor
// protobuf's descriptor machinery.
func TestAgentLinksNoStoreSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	banned := []string{
		"gocloud.dev/", "cloud.google.com/", "google.golang.org/api", "google.golang.org/grpc",
		"github.com/aws/", "github.com/Azure/", "go.opentelemetry.io/", "github.com/redis/go-redis",
		"google.golang.org/genproto",
		// descriptors, dynamic messages and protojson: 2.6 MB; the agent
		// decodes gRPC messages by field number (protowire) only
		"google.golang.org/protobuf/reflect/", "google.golang.org/protobuf/types/",
		"google.golang.org/protobuf/encoding/protojson", "github.com/retrace-dev/retrace/wire/protobuf/descriptors",
	}
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/retrace-dev/retrace/recording", "the agent links the recorder")
	for _, d := range deps {
		for _, b := range banned {
			assert.False(t, strings.HasPrefix(d, b), "patches links %s", d)
		}
	}
}

// A store URL whose store is not linked in is an error naming the import
// to add; the agent stays off.
func TestRecordToUnlinkedStore(t *testing.T) {
	for url, pkg := range map[string]string{
		"redis://127.0.0.1:6379/0": "recording/redisstore",
		"s3://bucket/prefix":       "recording/cloud",
		"gs://bucket":              "recording/cloud",
	} {
		stop, err := startFromEnv(env(map[string]string{"RETRACE_MODE": "record", "RETRACE_RECORD": url}))
		require.Error(t, err, url)
		assert.Nil(t, stop)
		assert.Contains(t, err.Error(), "RETRACE_RECORD")
		assert.Contains(t, err.Error(), `import _ "github.com/retrace-dev/retrace/`+pkg+`"`)
	}
}

// The blank import adds at most 4 MB to the example service's binary.
func TestAgentFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example service twice")
	}
	size := func(pkg string) int64 {
		bin := filepath.Join(t.TempDir(), "bin")
		out, err := exec.Command("go", "build", "-trimpath", "-o", bin, pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
		fi, err := os.Stat(bin)
		require.NoError(t, err)
		return fi.Size()
	}
	with, without := size("../internal/footprint/agent"), size("../internal/footprint/noagent")
	t.Logf("example service: %d bytes with the agent, %d without: +%d", with, without, with-without)
	assert.LessOrEqual(t, with-without, int64(4<<20))
}

// The counters of the recorder the environment started are readable
// through patches.Stats.
func TestStatsOfTheRecorder(t *testing.T) {
	_, ok := Stats()
	require.False(t, ok, "no recorder yet")
	dir := t.TempDir()
	stop, err := startFromEnv(env(map[string]string{"RETRACE_MODE": "record", "RETRACE_RECORD": dir}))
	require.NoError(t, err)
	st, ok := Stats()
	require.True(t, ok)
	assert.Zero(t, st.Dropped)
	require.NoError(t, stop(t.Context()))
	started.Lock()
	started.rec = nil
	started.Unlock()
}
