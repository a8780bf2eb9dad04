package objstore

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplit(t *testing.T) {
	cases := []struct {
		name, loc     string
		asDir         bool
		bucket, key   string
		wantErrSubstr string
	}{
		{name: "s3 file", loc: "s3://runs/v2/in.jsonl?region=eu-west-1", bucket: "s3://runs?region=eu-west-1", key: "v2/in.jsonl"},
		{name: "s3 dir", loc: "s3://runs/v2/out", asDir: true, bucket: "s3://runs", key: "v2/out"},
		{name: "file", loc: "file:///tmp/a/in.jsonl", bucket: "file:///tmp/a/?create_dir=true&no_tmp_dir=true", key: "in.jsonl"},
		{name: "file dir", loc: "file:///tmp/a/out", asDir: true, bucket: "file:///tmp/a/out?create_dir=true&no_tmp_dir=true"},
		{name: "file no path", loc: "file://", wantErrSubstr: "names no path"},
		{name: "no bucket", loc: "s3:///x", wantErrSubstr: "names no bucket"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, k, err := split(c.loc, c.asDir)
			if c.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErrSubstr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErrSubstr)
				}
				return
			}
			if err != nil || b != c.bucket || k != c.key {
				t.Errorf("split = %q, %q, %v; want %q, %q", b, k, err, c.bucket, c.key)
			}
		})
	}
}

func TestDirAndFilesOverFileURLsAndPaths(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for _, loc := range []string{filepath.Join(root, "plain"), "file://" + filepath.ToSlash(root) + "/bucket"} {
		t.Run(loc, func(t *testing.T) {
			d, err := OpenDir(ctx, loc)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			for _, name := range []string{"shard-0-of-2/results.json", "shard-1-of-2/results.json", "top.txt"} {
				w, err := d.Create(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.WriteString(w, "content of "+name); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			}
			names, err := d.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"shard-0-of-2/results.json", "shard-1-of-2/results.json", "top.txt"}; !reflect.DeepEqual(names, want) {
				t.Errorf("List = %v, want %v", names, want)
			}
			r, err := d.Open(ctx, "shard-1-of-2/results.json")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r)
			r.Close()
			if string(b) != "content of shard-1-of-2/results.json" {
				t.Errorf("read %q", b)
			}
			// The same file through the single-file functions.
			f, err := OpenFile(ctx, strings.TrimSuffix(loc, "/")+"/top.txt", nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(f)
			f.Close()
			if string(b) != "content of top.txt" {
				t.Errorf("OpenFile read %q", b)
			}
			w, err := CreateFile(ctx, strings.TrimSuffix(loc, "/")+"/new/file.jsonl", nil)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, "x")
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(root, "bucket", "new", "file.jsonl")); err != nil || string(b) != "x" {
		t.Errorf("file:// object on disk: %q, %v", b, err)
	}
}

func TestMissingFileNamesIt(t *testing.T) {
	_, err := OpenFile(context.Background(), "file://"+filepath.ToSlash(t.TempDir())+"/absent.jsonl", nil)
	if err == nil || !strings.Contains(err.Error(), "absent.jsonl") {
		t.Errorf("error %v, want one naming the file", err)
	}
}
