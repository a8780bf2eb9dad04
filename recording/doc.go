// Package recording is the session model of retrace (DESIGN.md 3.4), its
// JSONL codec (schema v1), the stores that keep sessions (a directory of
// rotated JSONL files, Redis, object storage through gocloud.dev/blob), and
// the record-side pipeline that samples, masks, caps and writes sessions in
// the background without ever blocking the service.
//
// Stores are opened by URL with [Open]:
//
//	DIR, ./DIR, /abs/DIR      directory store (rotated JSONL, optional gzip)
//	file://DIR                directory store (the same; DESIGN.md 3.1)
//	redis://HOST:PORT/N       Redis store (?prefix=KEYPREFIX, default "retrace:")
//	s3://, gs://, azblob://   object storage (gocloud.dev/blob URL syntax,
//	mem://                    in-memory bucket, for tests
//	blob+file:///abs/DIR      gocloud's fileblob driver on a local directory
//
// Readers stream: memory does not grow with the size of a file, and a line
// that does not parse is skipped and reported (file and line number) to the
// [WithErrorHandler] function, never fatal for the rest of the data.
package recording
