package blobstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
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

// An upload that fails (here: a bucket on a full disk) loses no session:
// the sessions the failed object took are written into the next object
// once the bucket takes writes again (issue 26).
func TestFailedUploadIsRetried(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" && os.Geteuid() == 0 {
			t.Fatalf("mount tmpfs: %v %s", err, out)
		}
		t.Skipf("needs root to mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	b, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	require.NoError(t, err)
	st := New(b)
	ctx := context.Background()
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 200<<10), 0o600))

	// 40 sessions of ~2 KiB each: the disk fills while they are written
	// or when the object is closed
	all := storetest.Sessions(40, "f")
	for _, s := range all {
		s.Inbound.Request = append(s.Inbound.Request, make([]byte, 2048)...)
		for i := range s.Inbound.Request[len(s.Inbound.Request)-2048:] {
			s.Inbound.Request[len(s.Inbound.Request)-2048+i] = 'x'
		}
	}
	stored := len(all)
	if err := st.Write(ctx, all); err != nil {
		var we *recording.WriteError
		require.ErrorAs(t, err, &we)
		stored = we.Stored
	}
	ferr := st.Flush(ctx)
	require.True(t, stored < len(all) || ferr != nil, "the full disk failed no write: the test proves nothing")

	// space returns; the caller retries what was not taken, then flushes
	require.NoError(t, os.Remove(filler))
	if stored < len(all) {
		require.NoError(t, st.Write(ctx, all[stored:]))
	}
	require.NoError(t, st.Flush(ctx))
	require.NoError(t, st.Close())

	again := New(mustBucket(t, dir))
	defer again.Close()
	ids := storetest.ScanIDs(t, again)
	assert.Len(t, ids, len(all), "every session once: %v", ids)
	seen := map[string]bool{}
	for _, id := range ids {
		assert.False(t, seen[id], "session %s stored twice", id)
		seen[id] = true
	}
}

func mustBucket(t *testing.T, dir string) *blob.Bucket {
	t.Helper()
	b, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	require.NoError(t, err)
	return b
}
