// Package diff compares what a replayed request produced with what was
// recorded: inbound HTTP responses (status, headers, bodies — JSON
// structurally, field by field, text line by line) and the requests the
// service sent downstream (HTTP, Redis commands, MySQL SQL, opaque bytes).
//
// Messages are compared after their transfer coding (chunked) and content
// coding (gzip, deflate) are removed. Every difference names the path of
// the value, such as "body.items[3].price" or "header.Location", so a rules
// file can ignore it: see Rule for the file format, ParsePattern for path
// patterns (with "*", "[*]" and "**" wildcards) and Glob for API and header
// patterns. Rules also compare arrays without order (optionally pairing
// elements by a key field) and numbers within a tolerance.
//
// A *Rules is safe for concurrent use; nil compares everything.
package diff
