// Package redis is RESP2 and RESP3 for retrace (wire.Protocol "redis"):
// detection of a connection from a RESP array or an inline command, the
// boundaries of client commands (arrays of bulk strings and inline
// commands) and of server replies of every RESP3 type, which commands are
// connection set-up, the match features of a command, the replies the
// mock server makes up itself, a command-line form ("SET k v") of
// commands and replies, each connection's state (the database SELECT
// chose, the RESP version HELLO asked for: State) on the recorded and the
// live side, and the masking of arguments and reply strings. It parses
// untrusted bytes and never panics on them.
package redis
