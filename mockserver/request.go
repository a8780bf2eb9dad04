package mockserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/redis"
)

// Protocol names, as in recording.Call.Proto.
const (
	protoHTTP  = recording.ProtoHTTP
	protoRedis = recording.ProtoRedis
	protoMySQL = recording.ProtoMySQL
	protoRaw   = recording.ProtoRaw
)

// request is what matching knows of one request, live or recorded: the same
// features are computed for both sides so strategies compare like with like.
// Slices alias the bytes the request was parsed from.
type request struct {
	raw     []byte   // exact bytes
	op      string   // identity: "GET /users/*", "SET", normalised SQL, "" for raw
	key     string   // HTTP target, Redis key, SQL text
	canon   []byte   // what Hamming distance compares
	body    []byte   // what the JSON strategy compares
	args    [][]byte // Redis arguments after the key; SQL literals or parameters
	setup   bool     // connection set-up, answered from any recording of the destination
	local   bool     // answered by the adapter itself (MySQL authentication)
	quit    bool     // the client ends the connection after this request
	noReply bool     // the protocol sends nothing back (COM_STMT_CLOSE)
	method  string   // HTTP method, for proxying
	owner   string   // trace the request belongs to when not its writer's (MySQL COM_STMT_CLOSE)
	stmt    string   // MySQL statement command: the SQL the statement was prepared with, when known
}

// httpRequest computes the features of one complete HTTP request.
func httpRequest(msg []byte, h http1.Head, limit int) request {
	body := http1.Body(msg, h, limit)
	canon := make([]byte, 0, len(h.Method)+1+len(h.Target)+1+len(body))
	canon = append(append(append(append(append(canon, h.Method...), ' '), h.Target...), '\n'), body...)
	return request{raw: msg, op: h.Method + " " + http1.NormalizePath(h.Target), key: h.Target,
		canon: canon, body: body, method: h.Method}
}

// redisRequest computes the features of one Redis command.
func redisRequest(msg []byte, args [][]byte) request {
	op := redis.Op(args)
	r := request{raw: msg, op: op, key: redis.KeyOf(args, op), canon: msg, setup: redis.IsSetupOp(op)}
	first := 1
	if strings.Contains(r.op, " ") {
		first = 2
	}
	if first+1 <= len(args) {
		r.args = args[first+1:]
	}
	if len(args) > first+1 {
		r.body = args[len(args)-1]
	}
	r.quit = r.op == "QUIT"
	return r
}

// mysqlRequest computes the features of one MySQL command payload.
// stmtSQL resolves a statement id to the SQL it was prepared from.
func mysqlRequest(msg, payload []byte, stmtSQL func(uint32) (string, bool)) request {
	r := request{raw: msg, canon: payload, body: payload}
	if len(payload) == 0 {
		r.op = "COM_EMPTY"
		return r
	}
	switch payload[0] {
	case mysql.ComQuery:
		q := string(payload[1:])
		norm, lits := mysql.NormalizeSQL(q)
		r.op, r.key = norm, q
		r.args = make([][]byte, len(lits))
		for i, l := range lits {
			r.args[i] = []byte(l)
		}
		r.setup = mysql.IsSetupQuery(q)
	case mysql.ComStmtPrepare:
		q := string(payload[1:])
		norm, _ := mysql.NormalizeSQL(q)
		r.op, r.key = "PREPARE "+norm, q
	case mysql.ComStmtExecute, mysql.ComStmtClose, mysql.ComStmtSendLongData, mysql.ComStmtReset:
		var idb [4]byte
		copy(idb[:], payload[1:]) // never append to payload: it aliases the recording
		id := binary.LittleEndian.Uint32(idb[:])
		verb := map[byte]string{mysql.ComStmtExecute: "EXECUTE ", mysql.ComStmtClose: "CLOSE ",
			mysql.ComStmtSendLongData: "LONG DATA ", mysql.ComStmtReset: "RESET "}[payload[0]]
		q, ok := stmtSQL(id)
		if ok {
			r.stmt = q
		} else {
			q = fmt.Sprintf("#%d", id)
		}
		norm, _ := mysql.NormalizeSQL(q)
		r.op, r.key = verb+norm, q
		params := payload[min(len(payload), 5):]
		r.args = [][]byte{params}
		r.canon = append([]byte(q+"\x00"), params...)
		r.noReply = payload[0] == mysql.ComStmtClose || payload[0] == mysql.ComStmtSendLongData
		r.setup = payload[0] == mysql.ComStmtReset
	case mysql.ComQuit:
		r.op, r.setup, r.quit, r.noReply = "COM_QUIT", true, true, true
	case mysql.ComPing, mysql.ComInitDB, mysql.ComResetConnection, mysql.ComChangeUser, mysql.ComSetOption:
		r.op, r.setup = fmt.Sprintf("COM_0x%02x", payload[0]), true
	default:
		r.op = fmt.Sprintf("COM_0x%02x", payload[0])
	}
	return r
}

// rawRequest: the generic protocol compares whole payloads.
func rawRequest(msg []byte) request {
	return request{raw: msg, canon: msg, body: msg}
}

// sniff guesses the protocol of a destination with no recording from the
// first bytes a client sent; "" means more bytes decide.
func sniff(b []byte) string {
	switch pgProto.Detect(b, nil) {
	case wire.Sure:
		return protoPostgres
	case wire.NotYet:
		return "" // at most a start-up packet's length (10000 bytes)
	}
	if i := bytes.IndexByte(b, ' '); i > 0 && i < 10 {
		switch string(b[:i]) {
		case "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE":
			return protoHTTP
		}
	}
	if len(b) > 0 && b[0] == '*' {
		return protoRedis
	}
	return protoRaw
}
