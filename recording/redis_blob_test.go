package recording

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/fileblob"
)

// redisPrefix returns a key prefix no other test uses and deletes its keys
// when the test ends.
func redisPrefix(t *testing.T, addr string) string {
	prefix := "retrace-test:" + trace.NewID()[:12] + ":"
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return prefix
}

func TestRedisStore(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := redisPrefix(t, addr)
	st, err := Open(context.Background(), "redis://"+addr+"/0?prefix="+prefix)
	require.NoError(t, err)
	assert.Equal(t, prefix, st.(*RedisStore).Prefix())
	storeContract(t, st)
}

func TestRedisStoreScanPagesAndBadKeys(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := redisPrefix(t, addr)
	var log errLog
	st := NewRedisStore(redis.NewClient(&redis.Options{Addr: addr}), WithKeyPrefix(prefix), WithErrorHandler(log.add))
	defer st.Close()
	ctx := context.Background()
	in := sessions(redisPage*2+3, "p")
	require.NoError(t, st.Write(ctx, in))
	// a key that is corrupt is reported and skipped, not fatal
	require.NoError(t, st.c.Set(ctx, prefix+"s:p0005", "{garbage", 0).Err())
	want := append(ids(in[:5]), ids(in[6:])...)
	assert.Equal(t, want, scanIDs(t, st))
	assert.EqualValues(t, 1, st.Skipped())
	require.Len(t, log.all(), 1)
	assert.Contains(t, log.all()[0].Error(), prefix+"s:p0005")
}

func TestBlobStore(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			dir := t.TempDir()
			b, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
			require.NoError(t, err)
			st := NewBlobStore(b, WithGzip(gz), WithRotateSessions(10), WithKeyPrefix("rec/"))
			storeContract(t, st)
			names, err := filepath.Glob(filepath.Join(dir, "rec", "sessions-*"))
			require.NoError(t, err)
			assert.Len(t, names, 3, "25 sessions at 10 per object")

			// the objects are plain session files: a DirStore reads them too
			ds, err := NewDirStore(filepath.Join(dir, "rec"))
			require.NoError(t, err)
			assert.Len(t, scanIDs(t, ds), 25)
		})
	}
}

func TestBlobStoreByURL(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := Open(ctx, "blob+file://"+dir+"?metadata=skip", WithGzip(true))
	require.NoError(t, err)
	require.NoError(t, st.Write(ctx, sessions(3, "u")))
	require.NoError(t, st.Close())
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.True(t, IsSessionFile(ents[0].Name()), ents[0].Name())

	again, err := Open(ctx, "blob+file://"+dir)
	require.NoError(t, err)
	defer again.Close()
	assert.Equal(t, []string{"u0000", "u0001", "u0002"}, scanIDs(t, again))
}
