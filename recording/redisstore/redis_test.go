package redisstore

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/storetest"
	"github.com/retrace-dev/retrace/trace"
)

// testPrefix returns a key prefix no other test uses and deletes its keys
// when the test ends.
func testPrefix(t *testing.T, addr string) string {
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

func TestStore(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := testPrefix(t, addr)
	st, err := recording.Open(context.Background(), "redis://"+addr+"/0?prefix="+prefix)
	require.NoError(t, err)
	assert.Equal(t, prefix, st.(*Store).Prefix())
	storetest.Contract(t, st)
}

func TestOpenURLs(t *testing.T) {
	st, err := recording.Open(context.Background(), "redis://127.0.0.1:1/0?prefix=x:")
	require.NoError(t, err)
	assert.Equal(t, "x:", st.(*Store).Prefix())
	require.NoError(t, st.Close())
	_, err = recording.Open(context.Background(), "redis://h:1/0?bogus=1")
	assert.Error(t, err)
}

func TestScanPagesAndBadKeys(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := testPrefix(t, addr)
	var log storetest.ErrLog
	st := New(redis.NewClient(&redis.Options{Addr: addr}), recording.WithKeyPrefix(prefix), recording.WithErrorHandler(log.Add))
	defer st.Close()
	ctx := context.Background()
	in := storetest.Sessions(page*2+3, "p")
	require.NoError(t, st.Write(ctx, in))
	// a key that is corrupt is reported and skipped, not fatal
	require.NoError(t, st.c.Set(ctx, prefix+"s:p0005", "{garbage", 0).Err())
	want := append(storetest.IDs(in[:5]), storetest.IDs(in[6:])...)
	assert.Equal(t, want, storetest.ScanIDs(t, st))
	assert.EqualValues(t, 1, st.Skipped())
	require.Len(t, log.All(), 1)
	assert.Contains(t, log.All()[0].Error(), prefix+"s:p0005")
}

// Sessions of one distributed trace are all kept; a session written again
// (a retried Write) is no error, and a different session under a stored
// id is refused, never overwritten.
func TestNeverOverwrites(t *testing.T) {
	addr := testenv.RedisAddr(t)
	ctx := context.Background()
	st := New(redis.NewClient(&redis.Options{Addr: addr}), recording.WithKeyPrefix(testPrefix(t, addr)))
	storetest.SharedTrace(t, st)

	st = New(redis.NewClient(&redis.Options{Addr: addr}), recording.WithKeyPrefix(testPrefix(t, addr)))
	defer st.Close()
	in := storetest.Sessions(2, "o")
	require.NoError(t, st.Write(ctx, in))
	require.NoError(t, st.Write(ctx, in), "the same sessions again")
	other := storetest.Session("o0001")
	other.App = "impostor"
	err := st.Write(ctx, []*recording.Session{other})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrExists) && errors.Is(err, recording.ErrRejected), "%v", err)
	got, err := st.Get(ctx, "o0001")
	require.NoError(t, err)
	assert.Equal(t, "orders", got.App, "the stored session is kept")
	assert.Len(t, storetest.ScanIDs(t, st), 2)
}
