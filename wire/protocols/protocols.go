// Package protocols is the table of every wire protocol retrace knows, in
// the order detection asks them, with raw as the fallback. Capture, the
// mock server, the downstream diff and the reports take protocols from
// All; a new protocol package adds its line here.
package protocols

import (
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/http2/h2mask"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/raw"
	"github.com/retrace-dev/retrace/wire/redis"
)

// All is every protocol, detection order first to last. Its maskers
// (Registry.MaskerFor) also mask recorded HTTP/2 and gRPC calls with the
// light wire/http2/h2mask, so that masking (which the agent links) does
// not bring wire/http2's framer and protobuf decoding with it.
var All = wire.NewRegistry(raw.Protocol,
	http1.Protocol,
	redis.Protocol,
	mysql.Protocol,
	postgres.Protocol,
).WithMaskers(map[string]wire.Masker{h2mask.Name: h2mask.Masker, h2mask.GRPCName: h2mask.Masker})
