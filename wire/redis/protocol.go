package redis

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/retrace-dev/retrace/wire"
)

// Name is the protocol's name in recordings.
const Name = "redis"

// Protocol is RESP as a wire.Protocol.
var Protocol wire.Protocol = protocol{}

type protocol struct{}

func (protocol) Name() string { return Name }

// Detect is sure of a RESP array of bulk strings ("*N\r\n$"): no other
// protocol starts so. An inline command ("PING\r\n", "GET k\r\n") is
// sure only once the server has answered it with a RESP reply: text
// protocols send such lines too (a raw "GET k t\n" ends in a bare LF and
// is never Redis; SMTP's "HELO x\r\n" names no Redis command).
func (protocol) Detect(client, server []byte) wire.Verdict {
	if len(client) == 0 {
		if len(server) > 0 {
			return wire.No // the server spoke first
		}
		return wire.NotYet
	}
	if client[0] == '*' {
		return detectArray(client)
	}
	return detectInline(client, server)
}

func detectArray(b []byte) wire.Verdict {
	i := 1
	for i < len(b) && i < 12 && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	switch {
	case i == len(b):
		return wire.NotYet
	case i == 1 || i == 12 || b[i] != '\r':
		return wire.No
	case i+1 == len(b):
		return wire.NotYet
	case b[i+1] != '\n':
		return wire.No
	case i+2 == len(b):
		return wire.NotYet
	case b[i+2] == '$':
		return wire.Sure
	}
	return wire.No
}

func detectInline(client, server []byte) wire.Verdict {
	end := bytes.IndexByte(client, '\n')
	line := client
	if end >= 0 {
		if end == 0 || client[end-1] != '\r' {
			return wire.No // a bare LF: not what Redis clients send
		}
		line = client[:end-1]
	}
	name := line
	if sp := bytes.IndexByte(line, ' '); sp >= 0 {
		name = line[:sp]
	}
	if len(name) == len(line) && end < 0 {
		// the name may go on: a known command's prefix waits
		if len(name) > maxCommandName || !isCommandPrefix(name) {
			return wire.No
		}
		return wire.NotYet
	}
	if !isCommand(name) {
		return wire.No
	}
	if end < 0 || len(server) == 0 {
		return wire.NotYet
	}
	if n, err := ReplyLen(server); err != nil {
		return wire.No
	} else if n == 0 {
		return wire.NotYet
	}
	return wire.Sure
}

func (protocol) NewFramer(side wire.Side, limit int) wire.Framer {
	return &framer{side: side, limit: limit}
}

type framer struct {
	side  wire.Side
	limit int
	args  [][]byte
}

func (f *framer) Next(buf []byte) (int, error) {
	if f.side == wire.Server {
		n, err := ReplyLen(buf)
		if err == nil && n == 0 && len(buf) > f.limit {
			err = fmt.Errorf("%w: Redis reply of more than %d bytes", wire.ErrTooLong, f.limit)
		}
		return n, err
	}
	args, n, err := AppendCommand(f.args[:0], buf, f.limit)
	f.args = args[:0]
	if err == nil && n == 0 && len(buf) > f.limit {
		err = fmt.Errorf("%w: Redis command of more than %d bytes", wire.ErrTooLong, f.limit)
	}
	return n, err
}

func (*framer) Request([]byte) {}

// ---- capture ----

func (protocol) NewTap() wire.Tap { return tap{} }

type tap struct{}

func (tap) Write(p []byte, tid string, begins bool) wire.Filing {
	return wire.Filing{Trace: tid, Setup: begins && IsSetupBurst(p)}
}
func (tap) Read([]byte) bool    { return true }
func (tap) ReadsOnWriter() bool { return true }

// IsSetupBurst reports whether every command of a write burst is
// connection set-up (HELLO, AUTH, SELECT, CLIENT …). The common case, a
// first command that is not set-up, is decided from its name without
// allocating.
func IsSetupBurst(req []byte) bool {
	name, ok := firstName(req)
	if !ok || !MayBeSetup(name) {
		return false
	}
	n := 0
	for len(req) > 0 {
		args, m, err := ParseCommand(req, len(req))
		if err != nil || m == 0 || !IsSetup(args) {
			return false
		}
		req, n = req[m:], n+1
	}
	return n > 0
}

// firstName returns the name of the command at the start of req
// ("*N\r\n$L\r\nNAME\r\n…", or an inline "NAME …\r\n").
func firstName(req []byte) ([]byte, bool) {
	if len(req) > 0 && req[0] != '*' {
		end := bytes.IndexAny(req, " \r\n")
		if end <= 0 {
			return nil, false
		}
		return req[:end], true
	}
	i := bytes.Index(req, []byte("\r\n"))
	if i < 2 || i+2 >= len(req) || req[i+2] != '$' {
		return nil, false
	}
	rest := req[i+3:]
	j := bytes.Index(rest, []byte("\r\n"))
	if j < 1 {
		return nil, false
	}
	l := 0
	for _, c := range rest[:j] {
		if c < '0' || c > '9' || l > 1<<20 {
			return nil, false
		}
		l = l*10 + int(c-'0')
	}
	if len(rest) < j+2+l {
		return nil, false
	}
	return rest[j+2 : j+2+l], true
}

// ---- mock server ----

// NewBook learns the state each recorded connection's set-up left it in
// (see State).
func (protocol) NewBook() wire.Book { return newBook() }

func (protocol) NewSession(b wire.Book) wire.Session {
	s := &session{conns: map[int64]State{}}
	s.book, _ = b.(*book)
	return s
}

// session follows the state of each recorded connection through one
// recording's calls.
type session struct {
	book  *book
	conns map[int64]State
}

// stateOf returns the state of a recorded connection: as this recording's
// own calls left it, else as the set-up the book saw of it, else fresh.
func (s *session) stateOf(conn int64) State {
	if st, ok := s.conns[conn]; ok || conn == 0 {
		return st
	}
	if s.book != nil {
		if st, ok := s.book.state(conn); ok {
			return st
		}
	}
	return State{}
}

// Units makes one unit per command of a recorded pipeline when the
// replies can be paired with the commands, else one unit for the call,
// each with the features of its connection's state.
func (s *session) Units(c wire.Call) []wire.Unit {
	var units []wire.Unit
	st := s.stateOf(c.Conn)
	start := st
	req, resp := c.Request, c.Response
	for len(req) > 0 {
		args, n, err := ParseCommand(req, len(req))
		if err != nil || n == 0 {
			break
		}
		m, err := ReplyLen(resp)
		if err != nil || m == 0 {
			break
		}
		units = append(units, wire.Unit{Req: FeaturesIn(req[:n], args, st), Resp: resp[:m]})
		st.Apply(args, resp[:m])
		req, resp = req[n:], resp[m:]
	}
	if c.Conn != 0 {
		s.conns[c.Conn] = st
	}
	if len(req) == 0 && len(resp) == 0 && len(units) > 0 {
		return units
	}
	r := wire.Request{Raw: c.Request, Op: "?", Canon: c.Request}
	if args, n, err := ParseCommand(c.Request, len(c.Request)); err == nil && n > 0 {
		r = FeaturesIn(c.Request, args, start)
	}
	return []wire.Unit{{Req: r, Resp: c.Response}}
}

// Features computes what matching knows of one command.
func Features(msg []byte, args [][]byte) wire.Request {
	op := Op(args)
	r := wire.Request{Raw: msg, Op: op, Key: KeyOf(args, op), Canon: msg, Setup: IsSetupOp(op)}
	first := 1
	if strings.Contains(r.Op, " ") {
		first = 2
	}
	if first+1 <= len(args) {
		r.Args = args[first+1:]
	}
	if len(args) > first+1 {
		r.Body = args[len(args)-1]
	}
	r.Quit = r.Op == "QUIT"
	return r
}

func (protocol) NewAnswerer(env wire.Env) wire.Answerer { return &answerer{max: env.MaxMessage} }

// answerer follows the live connection's state (the database it selected,
// the RESP version it asked for) from the set-up it is answered, so that
// its commands match those recorded in the same state and its answers are
// in its version.
type answerer struct {
	max  int
	args [][]byte // reused: a live request's arguments live only while it is answered
	st   State
}

func (a *answerer) Greeting() []byte { return nil }

func (a *answerer) Next(buf []byte) (wire.Request, int, []byte, error) {
	args, n, err := AppendCommand(a.args[:0], buf, a.max)
	if err != nil {
		return wire.Request{}, 0, nil, err
	}
	if n == 0 {
		if len(buf) > a.max {
			return wire.Request{}, 0, nil, fmt.Errorf("%w: Redis command of more than %d bytes", wire.ErrTooLong, a.max)
		}
		return wire.Request{}, 0, nil, nil
	}
	a.args = args
	return FeaturesIn(buf[:n], args, a.st), n, nil, nil
}

// Reply answers in the connection's RESP version (a reply recorded on a
// RESP3 connection is made RESP2 for a RESP2 one, ToRESP2) and follows a
// set-up command's effect on the connection.
func (a *answerer) Reply(r *wire.Request, resp []byte) []byte {
	a.follow(r, resp)
	if !a.st.RESP3 {
		return ToRESP2(resp)
	}
	return resp
}

func (a *answerer) follow(r *wire.Request, resp []byte) {
	if !r.Setup {
		return
	}
	if args, _, err := ParseCommand(r.Raw, len(r.Raw)); err == nil {
		a.st.Apply(args, resp)
	}
}

func (a *answerer) Synth(r *wire.Request) []byte {
	args, _, err := ParseCommand(r.Raw, len(r.Raw))
	if err != nil {
		return Error("retrace: unparsable set-up command")
	}
	resp := SetupReply(args)
	a.st.Apply(args, resp)
	return resp
}

func (a *answerer) Missing(_ *wire.Request, reason string) []byte {
	return Error("retrace: " + reason)
}

func (a *answerer) AnswerLen(_ *wire.Request, b []byte) (int, error) { return ReplyLen(b) }

// ---- decoded form ----

// Commands parses a burst of whole client commands (a command or a
// pipeline) into their arguments; false when b is not whole commands.
func Commands(b []byte) ([][]string, bool) {
	var cmds [][]string
	for len(b) > 0 {
		args, n, err := ParseCommand(b, len(b))
		if err != nil || n == 0 {
			return nil, false
		}
		s := make([]string, len(args))
		for i, a := range args {
			s[i] = string(a)
		}
		cmds = append(cmds, s)
		b = b[n:]
	}
	return cmds, len(cmds) > 0
}

// Decode shows commands as command lines, one per line ("SET k v"; an
// argument that is not plain text is quoted), with fields "args[i]" for
// one command and "cmd[n].args[i]" for a pipeline (the downstream diff's
// paths); replies as their values ("OK", "(nil)", "1) a").
func (protocol) Decode(side wire.Side, msg []byte) (wire.Decoded, bool) {
	if side == wire.Server {
		return decodeReplies(msg)
	}
	cmds, ok := Commands(msg)
	if !ok {
		return wire.Decoded{}, false
	}
	var d wire.Decoded
	var text strings.Builder
	for n, args := range cmds {
		if n > 0 {
			text.WriteByte('\n')
		}
		for i, a := range args {
			if i > 0 {
				text.WriteByte(' ')
			}
			text.WriteString(word(a))
			path := "args[" + strconv.Itoa(i) + "]"
			if len(cmds) > 1 {
				path = "cmd[" + strconv.Itoa(n) + "]." + path
			}
			d.Fields = append(d.Fields, wire.Field{Path: path, Value: a})
		}
	}
	d.Text = text.String()
	return d, true
}

// word is a command-line argument: as it is when it is plain printable
// text without spaces, else quoted.
func word(a string) string {
	if a == "" {
		return `""`
	}
	for i := 0; i < len(a); i++ {
		if c := a[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\'' {
			return strconv.Quote(a)
		}
	}
	return a
}

func decodeReplies(b []byte) (wire.Decoded, bool) {
	var d wire.Decoded
	var text strings.Builder
	for i := 0; len(b) > 0; i++ {
		n, err := ReplyLen(b)
		if err != nil || n == 0 {
			return wire.Decoded{}, false
		}
		if i > 0 {
			text.WriteByte('\n')
		}
		v := replyText(b[:n], 0)
		text.WriteString(v)
		d.Fields = append(d.Fields, wire.Field{Path: "reply[" + strconv.Itoa(i) + "]", Value: v})
		b = b[n:]
	}
	d.Text = text.String()
	return d, true
}

// replyText renders one whole reply (checked by ReplyLen).
func replyText(b []byte, depth int) string {
	l := line(b)
	if l < 0 || depth > maxDepth {
		return strconv.Quote(string(b))
	}
	head := string(b[1:l])
	switch b[0] {
	case '+', ':', ',', '#', '(':
		return head
	case '-', '!':
		if b[0] == '!' {
			n, _ := strconv.Atoi(head)
			return "(error) " + string(b[l+2:l+2+n])
		}
		return "(error) " + head
	case '_':
		return "(nil)"
	case '$', '=':
		n, _ := strconv.Atoi(head)
		if n < 0 {
			return "(nil)"
		}
		return word(string(b[l+2 : l+2+n]))
	}
	// aggregates
	count, _ := strconv.Atoi(head)
	if count < 0 {
		return "(nil)"
	}
	if b[0] == '%' || b[0] == '|' {
		count *= 2
	}
	parts := make([]string, 0, count)
	p := l + 2
	for range count {
		n, err := valueLen(b[p:], depth+1)
		if err != nil || n == 0 {
			break
		}
		parts = append(parts, replyText(b[p:p+n], depth+1))
		p += n
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// maxCommandName is the longest command name detection waits for.
const maxCommandName = 20

// commandNames are the Redis commands detection recognises inline (the
// first word of a command; subcommands follow it).
var commandNames = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range strings.Fields(`APPEND AUTH BGREWRITEAOF BGSAVE BITCOUNT BITFIELD BITOP BITPOS BLMOVE BLMPOP
		BLPOP BRPOP BRPOPLPUSH BZMPOP BZPOPMAX BZPOPMIN CLIENT CLUSTER COMMAND CONFIG COPY DBSIZE DECR DECRBY DEL
		DISCARD DUMP ECHO EVAL EVALSHA EVAL_RO EVALSHA_RO EXEC EXISTS EXPIRE EXPIREAT EXPIRETIME FCALL FLUSHALL
		FLUSHDB FUNCTION GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH GET GETBIT GETDEL GETEX GETRANGE GETSET HDEL
		HELLO HEXISTS HGET HGETALL HINCRBY HINCRBYFLOAT HKEYS HLEN HMGET HMSET HRANDFIELD HSCAN HSET HSETNX
		HSTRLEN HVALS INCR INCRBY INCRBYFLOAT INFO KEYS LASTSAVE LATENCY LCS LINDEX LINSERT LLEN LMOVE LMPOP
		LOLWUT LPOP LPOS LPUSH LPUSHX LRANGE LREM LSET LTRIM MEMORY MGET MIGRATE MODULE MONITOR MOVE MSET MSETNX
		MULTI OBJECT PERSIST PEXPIRE PEXPIREAT PEXPIRETIME PFADD PFCOUNT PFMERGE PING PSETEX PSUBSCRIBE PTTL
		PUBLISH PUBSUB PUNSUBSCRIBE QUIT RANDOMKEY READONLY READWRITE RENAME RENAMENX RESET RESTORE ROLE RPOP
		RPOPLPUSH RPUSH RPUSHX SADD SAVE SCAN SCARD SCRIPT SDIFF SDIFFSTORE SELECT SET SETBIT SETEX SETNX
		SETRANGE SINTER SINTERCARD SINTERSTORE SISMEMBER SLOWLOG SMEMBERS SMISMEMBER SMOVE SORT SORT_RO SPOP
		SPUBLISH SRANDMEMBER SREM SSCAN SSUBSCRIBE STRLEN SUBSCRIBE SUNION SUNIONSTORE SUNSUBSCRIBE SWAPDB
		TIME TOUCH TTL TYPE UNLINK UNSUBSCRIBE UNWATCH WAIT WATCH XACK XADD XAUTOCLAIM XCLAIM XDEL XGROUP
		XINFO XLEN XPENDING XRANGE XREAD XREADGROUP XREVRANGE XTRIM ZADD ZCARD ZCOUNT ZDIFF ZDIFFSTORE ZINCRBY
		ZINTER ZINTERCARD ZINTERSTORE ZLEXCOUNT ZMPOP ZMSCORE ZPOPMAX ZPOPMIN ZRANDMEMBER ZRANGE ZRANGEBYLEX
		ZRANGEBYSCORE ZRANGESTORE ZRANK ZREM ZREMRANGEBYLEX ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREVRANGE
		ZREVRANGEBYLEX ZREVRANGEBYSCORE ZREVRANK ZSCAN ZSCORE ZUNION ZUNIONSTORE ACL`) {
		m[c] = true
	}
	return m
}()

func isCommand(name []byte) bool {
	return len(name) <= maxCommandName && commandNames[strings.ToUpper(string(name))]
}

func isCommandPrefix(name []byte) bool {
	up := strings.ToUpper(string(name))
	for c := range commandNames {
		if strings.HasPrefix(c, up) {
			return true
		}
	}
	return false
}
