// Package mysql is the MySQL client/server protocol for retrace
// (wire.Protocol "mysql"): detection from the server greeting, packet
// framing both ways, the command bytes, which commands are connection
// set-up, prepared statements (their ids, which request prepared each, the
// SQL an execute runs), the match features of a command, the greeting, OK
// and error packets the mock server sends, SQL normalisation, and a
// decoded form of commands with their statement and typed parameters, and
// the masking of statement literals, parameters and result rows. It
// parses untrusted bytes and never panics on them.
package mysql
