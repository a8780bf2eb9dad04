package blobstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/fileblob"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/storetest"
)

func TestStore(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			dir := t.TempDir()
			b, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
			require.NoError(t, err)
			st := New(b, recording.WithGzip(gz), recording.WithRotateSessions(10), recording.WithKeyPrefix("rec/"))
			storetest.Contract(t, st)
			names, err := filepath.Glob(filepath.Join(dir, "rec", "sessions-*"))
			require.NoError(t, err)
			assert.Len(t, names, 3, "25 sessions at 10 per object")

			// the objects are plain session files: a DirStore reads them too
			ds, err := recording.NewDirStore(filepath.Join(dir, "rec"))
			require.NoError(t, err)
			assert.Len(t, storetest.ScanIDs(t, ds), 25)
		})
	}
}

func TestStoreByURL(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := recording.Open(ctx, "blob+file://"+dir+"?metadata=skip", recording.WithGzip(true))
	require.NoError(t, err)
	require.NoError(t, st.Write(ctx, storetest.Sessions(3, "u")))
	require.NoError(t, st.Close())
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.True(t, recording.IsSessionFile(ents[0].Name()), ents[0].Name())

	again, err := recording.Open(ctx, "blob+file://"+dir)
	require.NoError(t, err)
	defer again.Close()
	assert.Equal(t, []string{"u0000", "u0001", "u0002"}, storetest.ScanIDs(t, again))

	mem, err := recording.Open(ctx, "mem://")
	require.NoError(t, err)
	assert.IsType(t, &Store{}, mem)
	require.NoError(t, mem.Close())
}

func TestKeepsEverySessionOfATrace(t *testing.T) {
	st, err := recording.Open(context.Background(), "mem://")
	require.NoError(t, err)
	storetest.SharedTrace(t, st)
}
