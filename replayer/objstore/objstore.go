// Package objstore opens the files of the load pipeline wherever they live:
// a local path, or an object in a bucket named by a gocloud.dev/blob URL
// (file:///abs/dir, s3://bucket/prefix?region=…, gs://, azblob://), so that
// every step can read its input from, and write its output to, object
// storage, as many machines running one test need.
//
// Only the file:// driver is linked by this package; a program links the
// others with blank imports (cmd/retrace does, through recording/cloud).
//
// A location is split into a bucket and a key: for file:// URLs the bucket
// is the parent directory (of a file) or the directory itself (of a Dir);
// for other schemes the host is the bucket and the path the key, and the
// query stays with the bucket URL.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
)

// IsURL reports whether loc is a bucket URL rather than a local path.
func IsURL(loc string) bool {
	i := strings.Index(loc, "://")
	return i > 0 && !strings.ContainsAny(loc[:i], `/\.`)
}

// split turns a URL into the bucket URL and the key inside it. asDir makes
// a file:// URL's path the bucket itself.
func split(loc string, asDir bool) (bucketURL, key string, err error) {
	u, err := url.Parse(loc)
	if err != nil {
		return "", "", fmt.Errorf("bad location %q: %w", loc, err)
	}
	if u.Scheme == "file" {
		p := u.Path
		if p == "" {
			return "", "", fmt.Errorf("location %q names no path (want file:///abs/path)", loc)
		}
		if asDir {
			q := u.Query()
			q.Set("create_dir", "true")
			q.Set("no_tmp_dir", "true") // temp files next to the result, not in /tmp (another file system)
			return "file://" + (&url.URL{Path: p}).EscapedPath() + "?" + q.Encode(), "", nil
		}
		dir, file := path.Split(p)
		if file == "" {
			return "", "", fmt.Errorf("location %q names a directory, not a file", loc)
		}
		b, _, err := split("file://"+dir+"?"+u.RawQuery, true)
		return b, file, err
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("location %q names no bucket", loc)
	}
	key = strings.TrimPrefix(u.Path, "/")
	b := &url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: u.RawQuery}
	return b.String(), key, nil
}

// OpenFile opens the file at loc for reading: a local path, "-" for stdin,
// or a bucket URL.
func OpenFile(ctx context.Context, loc string, stdin io.Reader) (io.ReadCloser, error) {
	if loc == "-" {
		return io.NopCloser(stdin), nil
	}
	if !IsURL(loc) {
		return os.Open(loc)
	}
	b, key, err := openObject(ctx, loc)
	if err != nil {
		return nil, err
	}
	r, err := b.NewReader(ctx, key, nil)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("opening %q: %w", loc, err)
	}
	return &bucketFile{ReadCloser: r, b: b}, nil
}

// CreateFile creates (or replaces) the file at loc: a local path, "-" for
// stdout, or a bucket URL. An object becomes visible when it is closed.
func CreateFile(ctx context.Context, loc string, stdout io.Writer) (io.WriteCloser, error) {
	if loc == "-" {
		return nopWriteCloser{stdout}, nil
	}
	if !IsURL(loc) {
		if dir := filepath.Dir(loc); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
		return os.Create(loc)
	}
	b, key, err := openObject(ctx, loc)
	if err != nil {
		return nil, err
	}
	w, err := b.NewWriter(ctx, key, nil)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("creating %q: %w", loc, err)
	}
	return &bucketFile{WriteCloser: w, b: b}, nil
}

// openObject opens the bucket of the object URL loc and returns it with
// the object's key.
func openObject(ctx context.Context, loc string) (*blob.Bucket, string, error) {
	bu, key, err := split(loc, false)
	if err != nil {
		return nil, "", err
	}
	b, err := blob.OpenBucket(ctx, bu)
	if err != nil {
		return nil, "", fmt.Errorf("opening bucket of %q: %w", loc, err)
	}
	return b, key, nil
}

// bucketFile closes its bucket with the object.
type bucketFile struct {
	io.ReadCloser
	io.WriteCloser
	b *blob.Bucket
}

func (f *bucketFile) Close() error {
	var err error
	if f.ReadCloser != nil {
		err = f.ReadCloser.Close()
	}
	if f.WriteCloser != nil {
		err = f.WriteCloser.Close()
	}
	return errors.Join(err, f.b.Close())
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Dir is a directory: a local one or a key prefix in a bucket.
type Dir struct {
	loc    string
	local  string // local directory, when bucket is nil
	bucket *blob.Bucket
	prefix string // "" or ending in "/"
}

// OpenDir opens the directory at loc (a local path or a bucket URL). Local
// directories and file:// ones are created on the first write.
func OpenDir(ctx context.Context, loc string) (*Dir, error) {
	if loc == "" {
		return nil, errors.New("empty directory location")
	}
	if !IsURL(loc) {
		return &Dir{loc: loc, local: loc}, nil
	}
	bu, key, err := split(loc, true)
	if err != nil {
		return nil, err
	}
	b, err := blob.OpenBucket(ctx, bu)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %q: %w", loc, err)
	}
	if key != "" && !strings.HasSuffix(key, "/") {
		key += "/"
	}
	return &Dir{loc: loc, bucket: b, prefix: key}, nil
}

// String is the location the Dir was opened with.
func (d *Dir) String() string { return d.loc }

// Path names a file of the Dir for messages: the location joined with name.
func (d *Dir) Path(name string) string {
	if d.bucket == nil {
		return filepath.Join(d.local, filepath.FromSlash(name))
	}
	return strings.TrimSuffix(strings.SplitN(d.loc, "?", 2)[0], "/") + "/" + name
}

// Create creates (or replaces) the file name ("a/b.json" for a
// subdirectory) in the Dir.
func (d *Dir) Create(ctx context.Context, name string) (io.WriteCloser, error) {
	if d.bucket == nil {
		p := filepath.Join(d.local, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		return os.Create(p)
	}
	w, err := d.bucket.NewWriter(ctx, d.prefix+name, nil)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", d.Path(name), err)
	}
	return w, nil
}

// Open opens the file name in the Dir.
func (d *Dir) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if d.bucket == nil {
		return os.Open(filepath.Join(d.local, filepath.FromSlash(name)))
	}
	r, err := d.bucket.NewReader(ctx, d.prefix+name, nil)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", d.Path(name), err)
	}
	return r, nil
}

// List returns the names of every file under the Dir, recursively, with
// "/" separators, sorted.
func (d *Dir) List(ctx context.Context) ([]string, error) {
	var names []string
	if d.bucket == nil {
		err := filepath.WalkDir(d.local, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() {
				rel, err := filepath.Rel(d.local, p)
				if err != nil {
					return err
				}
				names = append(names, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(names)
		return names, nil
	}
	it := d.bucket.List(&blob.ListOptions{Prefix: d.prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", d.loc, err)
		}
		if !obj.IsDir {
			names = append(names, strings.TrimPrefix(obj.Key, d.prefix))
		}
	}
	sort.Strings(names)
	return names, nil
}

// Close releases the bucket. It is safe to call twice.
func (d *Dir) Close() error {
	if d.bucket == nil {
		return nil
	}
	b := d.bucket
	d.bucket = nil
	d.local = "\x00closed" // a closed Dir fails instead of writing locally
	return b.Close()
}
