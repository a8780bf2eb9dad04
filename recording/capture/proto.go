package capture

import (
	"bytes"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/redis"
)

// Protocols of recorded calls (DESIGN.md 3.4).
const (
	protoHTTP  = recording.ProtoHTTP
	protoRedis = recording.ProtoRedis
	protoMySQL = recording.ProtoMySQL
	protoRaw   = recording.ProtoRaw
	protoPG    = postgres.Proto
)

// detectClient names the protocol of a connection whose client spoke
// first, from its first bytes.
func detectClient(p []byte) string {
	switch {
	case looksHTTPRequest(p):
		return protoHTTP
	case len(p) >= 2 && p[0] == '*' && p[1] >= '0' && p[1] <= '9':
		return protoRedis
	case postgres.Detect(p) == wire.Sure:
		return protoPG
	}
	return protoRaw
}

func looksHTTPRequest(p []byte) bool {
	sp := bytes.IndexByte(p, ' ')
	if sp < 3 || sp > 16 {
		return false
	}
	for _, c := range p[:sp] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// isMySQLGreeting reports whether p, the first bytes a server sent, start
// a MySQL protocol-10 handshake packet.
func isMySQLGreeting(p []byte) bool {
	if len(p) < 5 {
		return false
	}
	n := int(p[0]) | int(p[1])<<8 | int(p[2])<<16
	return p[3] == 0 && p[4] == 10 && n > 20 && n < 1024
}

// mayBeMySQLGreeting reports whether p, the first bytes a server sent, are
// a MySQL greeting or could be the start of one (a read shorter than the
// 5 bytes isMySQLGreeting needs: the packet header alone, for instance).
func mayBeMySQLGreeting(p []byte) bool {
	if len(p) >= 5 {
		return isMySQLGreeting(p)
	}
	switch len(p) {
	case 4:
		if p[3] != 0 {
			return false
		}
		fallthrough
	case 3:
		n := int(p[0]) | int(p[1])<<8 | int(p[2])<<16
		return n > 20 && n < 1024
	case 2:
		return p[1] < 1024>>8
	}
	return len(p) == 1
}

// isSetupRedis reports whether every command of a write burst is
// connection set-up (HELLO, AUTH, SELECT, CLIENT …), as the mock server
// classifies them. The common case, a first command that is not set-up, is
// decided from its name without allocating.
func isSetupRedis(req []byte) bool {
	name, ok := firstRedisName(req)
	if !ok || !redis.MayBeSetup(name) {
		return false
	}
	n := 0
	for len(req) > 0 {
		args, m, err := redis.ParseCommand(req, len(req))
		if err != nil || m == 0 || !redis.IsSetup(args) {
			return false
		}
		req, n = req[m:], n+1
	}
	return n > 0
}

// firstRedisName returns the name of the RESP command at the start of req
// ("*N\r\n$L\r\nNAME\r\n…").
func firstRedisName(req []byte) ([]byte, bool) {
	i := bytes.Index(req, []byte("\r\n"))
	if i < 2 || req[0] != '*' || i+1 >= len(req) || req[i+2] != '$' {
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

// isSetupMySQL reports whether a command-phase request is session set-up
// (SET …, SELECT @@…).
func isSetupMySQL(req []byte) bool {
	p, _, n, err := mysql.NextMessage(req, len(req))
	if err != nil || n == 0 || n != len(req) || len(p) < 2 || p[0] != mysql.ComQuery {
		return false
	}
	return mysql.IsSetupQuery(string(p[1:]))
}

// isSetupPostgres reports whether a PostgreSQL write is connection set-up
// (start-up packets, authentication, a ping, Terminate).
func isSetupPostgres(req []byte) bool { return postgres.SetupWrite(req) }
