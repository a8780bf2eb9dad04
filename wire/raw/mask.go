package raw

import "github.com/retrace-dev/retrace/wire"

// Mask applies the rules' patterns to the bytes: a raw protocol's values
// are wherever they match (wire.Masker).
func (protocol) Mask(_ wire.Side, msg []byte, rules wire.MaskRules) []byte {
	return rules.Text(msg)
}
