package http2

import (
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http2/h2mask"
)

// Mask masks a recorded half of an HTTP/2 or gRPC stream (wire.Masker;
// see h2mask.Mask, which a program that does not link this package uses).
func (protocol) Mask(side wire.Side, msg []byte, rules wire.MaskRules) []byte {
	return h2mask.Mask(side, msg, rules)
}
