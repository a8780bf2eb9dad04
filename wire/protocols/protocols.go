// Package protocols is the table of every wire protocol retrace knows, in
// the order detection asks them, with raw as the fallback. Capture, the
// mock server, the downstream diff and the reports take protocols from
// All; a new protocol package adds its line here.
package protocols

import (
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/raw"
	"github.com/retrace-dev/retrace/wire/redis"
)

// All is every protocol, detection order first to last.
var All = wire.NewRegistry(raw.Protocol,
	http1.Protocol,
	redis.Protocol,
	mysql.Protocol,
	postgres.Protocol,
	http2.Protocol,
	http2.GRPC, // never detected: the name of HTTP/2 streams that are gRPC calls
)
