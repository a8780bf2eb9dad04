// Package load replays timed requests against a target and measures them: the
// third step of the load pipeline (extract → prepare → load → analyze).
//
// The input is the timed-request JSONL format ([Request], [Reader],
// [Writer]); see FORMAT.md beside this file. A [Runner] reads it as a
// stream, paces it ([Mode]: the recorded timestamps scaled by a speed factor,
// a fixed or linearly ramped rate, or as fast as the target answers), hands
// each request to an [Executor] (HTTP or SQL through database/sql) and
// records the latency measured from the intended send time into HDR
// histograms per API, so a slow target cannot hide its latency by slowing the
// sender down (no coordinated omission).
//
// A run may be one shard of many ([Shard]): shard I of N runs the requests
// whose input index hashes to I, a deterministic and disjoint subset, with a
// distinct start offset. Each shard writes its own results: results.json
// (per-API histograms in the HdrHistogram V2 encoding, which merge exactly),
// timeseries.jsonl (one line per second) and errors.jsonl (every failed
// request in the input format plus its error, so it can be replayed alone).
// Package analyze merges them.
package load
