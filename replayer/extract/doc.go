// Package extract is the first step of the load pipeline: it reads traffic
// from a source — recordings (recording.Session), JSONL logs with
// configurable field names, or access logs in the common and combined
// formats of nginx and Apache — and writes the requests of a time window as
// timed-request JSONL (package load), ordered by time.
//
// Sources are streamed. Ordering uses bounded memory: requests are sorted in
// chunks of Options.ChunkSize, chunks beyond the first are spilled to
// temporary files, and the sorted runs are merged; an already ordered source
// costs one pass plus the spill. Lines that do not parse are counted and
// reported with their line numbers, never fatal.
package extract
