package redis

import (
	"bytes"
	"strconv"
	"strings"
)

// Op returns the identity of a command: its name in upper case, followed by
// the subcommand for container commands (CLIENT SETINFO, CONFIG GET, …).
func Op(args [][]byte) string {
	if len(args) == 0 {
		return ""
	}
	name, ok := commonNames[string(args[0])] // no allocation for the usual commands
	if !ok {
		name = strings.ToUpper(string(args[0]))
	}
	switch name {
	case "CLIENT", "CONFIG", "CLUSTER", "COMMAND", "OBJECT", "MEMORY", "SCRIPT", "FUNCTION", "XINFO", "ACL", "LATENCY", "MODULE":
		if len(args) > 1 {
			return name + " " + strings.ToUpper(string(args[1]))
		}
	}
	return name
}

// Key returns the first key a command names ("" for none): the argument
// after the command (and subcommand) name.
func Key(args [][]byte) string { return KeyOf(args, Op(args)) }

// KeyOf is Key for a command whose Op is op.
func KeyOf(args [][]byte, op string) string {
	i := 1
	if strings.Contains(op, " ") {
		i = 2
	}
	if i < len(args) {
		return string(args[i])
	}
	return ""
}

// IsSetup reports whether a command is connection set-up (DESIGN.md 3.4),
// answered per connection rather than per request.
func IsSetup(args [][]byte) bool { return IsSetupOp(Op(args)) }

// setupNames are the commands that are connection set-up, besides CLIENT
// and its subcommands.
var setupNames = [...]string{"HELLO", "AUTH", "SELECT", "PING", "READONLY", "READWRITE", "QUIT", "RESET"}

// IsSetupOp is IsSetup for a command whose Op is op.
func IsSetupOp(op string) bool {
	for _, s := range setupNames {
		if op == s {
			return true
		}
	}
	return strings.HasPrefix(op, "CLIENT ")
}

// MayBeSetup reports, from a command's name alone (in any case), whether
// the command can be set-up: a check that allocates nothing before
// parsing the command for IsSetup.
func MayBeSetup(name []byte) bool {
	if len(name) == len("CLIENT") && bytes.EqualFold(name, []byte("CLIENT")) {
		return true
	}
	for _, s := range setupNames {
		if len(name) == len(s) && bytes.EqualFold(name, []byte(s)) {
			return true
		}
	}
	return false
}

// SetupReply is the reply the mock server makes up for a set-up command that
// no recording of the destination answered.
func SetupReply(args [][]byte) []byte {
	switch Op(args) {
	case "PING":
		if len(args) > 1 {
			return Bulk(nil, args[1])
		}
		return []byte("+PONG\r\n")
	case "HELLO":
		proto := "2"
		if len(args) > 1 {
			proto = string(args[1])
		}
		if proto == "3" {
			return []byte("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n" +
				"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n" +
				"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")
		}
		return []byte("*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n" +
			"$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n" +
			"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")
	case "CLIENT ID":
		return []byte(":1\r\n")
	case "CLIENT GETNAME":
		return []byte("$-1\r\n")
	}
	return []byte("+OK\r\n")
}

// Bulk appends b as a bulk string to dst.
func Bulk(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// Error returns a simple-error reply "-ERR msg"; line breaks in msg are
// replaced so the reply stays one line.
func Error(msg string) []byte {
	msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	return []byte("-ERR " + msg + "\r\n")
}

// Command encodes args as a RESP array of bulk strings.
func Command(args ...string) []byte {
	var b bytes.Buffer
	b.WriteByte('*')
	b.WriteString(strconv.Itoa(len(args)))
	b.WriteString("\r\n")
	out := b.Bytes()
	for _, a := range args {
		out = Bulk(out, []byte(a))
	}
	return out
}

// commonNames maps the usual spellings of frequent commands to their
// upper-case names.
var commonNames = func() map[string]string {
	m := map[string]string{}
	for _, c := range []string{"GET", "SET", "DEL", "EXISTS", "EXPIRE", "PEXPIRE", "TTL", "INCR", "INCRBY", "DECR",
		"DECRBY", "MGET", "MSET", "SETEX", "SETNX", "GETSET", "HGET", "HSET", "HMGET", "HMSET", "HGETALL", "HDEL",
		"HINCRBY", "LPUSH", "RPUSH", "LPOP", "RPOP", "LRANGE", "LLEN", "SADD", "SREM", "SMEMBERS", "SISMEMBER",
		"ZADD", "ZREM", "ZRANGE", "ZRANGEBYSCORE", "ZSCORE", "ZINCRBY", "PING", "HELLO", "AUTH", "SELECT",
		"CLIENT", "MULTI", "EXEC", "EVALSHA", "EVAL", "SCAN", "KEYS", "TYPE", "UNLINK"} {
		m[c] = c
		m[strings.ToLower(c)] = c
	}
	return m
}()
