package recording

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallDisk mounts a tmpfs of size bytes (needs root; skipped otherwise)
// and returns its directory.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// readLines returns the lines of every session file of dir, decompressed.
func readLines(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "sessions-*"))
	require.NoError(t, err)
	var lines []string
	for _, name := range files {
		f, err := os.Open(name)
		require.NoError(t, err)
		var r io.Reader = f
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(f)
			if errors.Is(err, io.EOF) { // created when the disk was full: empty
				f.Close()
				continue
			}
			require.NoError(t, err, name)
			r = zr
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		require.NoError(t, sc.Err(), "%s reads to its end", name)
		f.Close()
	}
	return lines
}

// A disk that fills up and frees again: no half-written line, no line glued
// to the next; every session the store took is written once there is room.
func TestDirStoreDiskFullAndFreed(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			disk := smallDisk(t, 2<<20)
			filler := filepath.Join(disk, "filler")
			// leave about 40 KB
			require.NoError(t, os.WriteFile(filler, make([]byte, 2<<20-40<<10), 0o600))
			dir := filepath.Join(disk, "rec")
			st, err := NewDirStore(dir, WithGzip(gz), WithRotateSessions(150))
			require.NoError(t, err)
			defer st.Close()
			ctx := context.Background()

			rng := rand.New(rand.NewPCG(1, 2)) // incompressible bodies fill the disk with gzip too
			stored := map[string]bool{}
			var all []*Session
			full := 0
			for batch := 0; batch < 20; batch++ {
				ss := make([]*Session, 25)
				for i := range ss {
					s := sampleSession(fmt.Sprintf("d%02d-%02d", batch, i))
					s.Inbound.Response = append(s.Inbound.Response, fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, randomHex(rng, 250+batch*i%100))...)
					ss[i] = s
				}
				all = append(all, ss...)
				err := st.Write(ctx, ss)
				if err == nil {
					err = st.Flush(ctx)
					for _, s := range ss {
						stored[s.ID] = true
					}
				} else {
					var we *WriteError
					n := 0
					if errors.As(err, &we) {
						n = we.Stored
					}
					for _, s := range ss[:n] {
						stored[s.ID] = true
					}
				}
				if err != nil {
					require.ErrorIs(t, err, syscall.ENOSPC)
					full++
				}
				for _, line := range readLines(t, dir) {
					_, perr := Unmarshal([]byte(line))
					require.NoError(t, perr, "batch %d: every line on the full disk parses: %.80q", batch, line)
				}
			}
			require.Positive(t, full, "the disk filled up")

			require.NoError(t, os.Remove(filler)) // space again
			var retry []*Session
			for _, s := range all {
				if !stored[s.ID] {
					retry = append(retry, s)
				}
			}
			require.NoError(t, st.Write(ctx, retry), "the store resumes")
			require.NoError(t, st.Close())

			lines := readLines(t, dir)
			seen := map[string]int{}
			for _, line := range lines {
				s, err := Unmarshal([]byte(line))
				require.NoError(t, err, "%.80q", line)
				seen[s.ID]++
			}
			assert.Len(t, seen, len(all), "every session is there")
			for id, n := range seen {
				assert.Equal(t, 1, n, "session %s once", id)
			}
			var bad []error
			rd, err := NewDirStore(dir, WithErrorHandler(func(err error) { bad = append(bad, err) }))
			require.NoError(t, err)
			assert.Len(t, scanIDs(t, rd), len(all))
			assert.Empty(t, bad, "nothing reported damaged")
		})
	}
}

// Files are 0600 and the directory 0700 unless the store is told otherwise.
func TestDirStorePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	st, err := NewDirStore(dir)
	require.NoError(t, err)
	require.NoError(t, st.Write(context.Background(), sessions(1, "p")))
	require.NoError(t, st.Close())
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	files, err := st.Files()
	require.NoError(t, err)
	require.Len(t, files, 1)
	fi, err = os.Stat(files[0])
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	dir2 := filepath.Join(t.TempDir(), "shared")
	st, err = NewDirStore(dir2, WithPermissions(0o640, 0o750))
	require.NoError(t, err)
	require.NoError(t, st.Write(context.Background(), sessions(1, "p")))
	require.NoError(t, st.Close())
	fi, err = os.Stat(dir2)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o750), fi.Mode().Perm()&0o750)
}

// A gzip file cut short, or with corrupt data, is reported with its file
// and the sessions read before the damage; the sessions before it are read.
func TestTruncatedGzipIsReported(t *testing.T) {
	dir := t.TempDir()
	st, err := NewDirStore(dir, WithGzip(true))
	require.NoError(t, err)
	in := sessions(200, "z")
	for i := 0; i < len(in); i += 50 {
		require.NoError(t, st.Write(context.Background(), in[i:i+50]))
		require.NoError(t, st.Flush(context.Background())) // a member per flush
	}
	require.NoError(t, st.Close())
	files, err := st.Files()
	require.NoError(t, err)
	require.Len(t, files, 1)
	whole, err := os.ReadFile(files[0])
	require.NoError(t, err)
	cases := map[string][]byte{
		"cut in half": whole[:len(whole)/2],
		"corrupt":     append(append(append([]byte(nil), whole[:len(whole)/2]...), make([]byte, 64)...), whole[len(whole)/2+64:]...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(files[0], b, 0o600))
			var reports []error
			rd, err := NewDirStore(dir, WithErrorHandler(func(err error) { reports = append(reports, err) }))
			require.NoError(t, err)
			got := scanIDs(t, rd)
			require.Len(t, reports, 1, "the damage is reported")
			var de *DamagedError
			require.ErrorAs(t, reports[0], &de)
			assert.Equal(t, files[0], de.Source)
			assert.Equal(t, len(got), de.Sessions, "with the sessions read")
			assert.GreaterOrEqual(t, len(got), 50, "the members before the damage are read")
			assert.Less(t, len(got), 200)
			assert.Contains(t, reports[0].Error(), filepath.Base(files[0]))
			assert.EqualValues(t, 1, rd.Skipped())
		})
	}
}

func TestMissingDirectoryIsAnError(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "nope"))
	require.NoError(t, err)
	err = st.Scan(context.Background(), func(*Session) error { return nil })
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "nope")
}

func randomHex(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return hex.EncodeToString(b)
}
