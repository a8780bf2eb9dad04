// Package report turns the results of a regression replay into what people
// and CI systems read: a terminal summary with a progress bar, summary.json
// (DESIGN.md 3.5), sessions.jsonl (one line per replay), JUnit XML, and a
// self-contained HTML page (inline CSS and script, nothing fetched) with
// totals, a table per API, and for each failing session the inbound
// request, the recorded and replayed responses side by side with the
// differing fields highlighted, and every downstream call with its diff.
//
// A Report takes results one at a time (Add) and keeps only counters, a
// bounded list of failing session ids and the evidence of the first
// Options.MaxDetails failing sessions, so memory stays flat however many
// sessions are replayed; per-session lines stream to disk.
package report
