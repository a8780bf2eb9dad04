package recording_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/storetest"
)

func TestDirStore(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			dir := t.TempDir()
			st, err := recording.NewDirStore(dir, recording.WithGzip(gz), recording.WithRotateSessions(7))
			require.NoError(t, err)
			storetest.Contract(t, st)
			files, err := st.Files()
			require.NoError(t, err)
			assert.Len(t, files, 4, "25 sessions at 7 per file")
			for _, f := range files {
				assert.Equal(t, gz, strings.HasSuffix(f, ".jsonl.gz"), f)
			}
			// a second store on the same directory reads what the first wrote
			again, err := recording.Open(context.Background(), "file://"+dir)
			require.NoError(t, err)
			assert.Len(t, storetest.ScanIDs(t, again), 25)
			require.NoError(t, again.Close())
		})
	}
}

func TestDirStoreKeepsEverySessionOfATrace(t *testing.T) {
	st, err := recording.NewDirStore(t.TempDir())
	require.NoError(t, err)
	storetest.SharedTrace(t, st)
}
