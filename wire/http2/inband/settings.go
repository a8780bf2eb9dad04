package inband

// PeerSettings follows the frames the receiving peer sends (the other
// direction of the connection whose header blocks a Rewriter writes), fed
// in any split, for the one setting that binds the Rewriter's encoder:
// SETTINGS_HEADER_TABLE_SIZE. Every other byte is skipped unparsed. Not
// safe for concurrent use.
type PeerSettings struct {
	hdr     [frameHeaderLen]byte
	have    int    // bytes of hdr filled
	skip    int    // payload bytes of the current frame still to skip
	want    int    // payload bytes of the current SETTINGS frame still to come
	payload []byte // of the SETTINGS frame in progress
	// preface: a server's direction starts with its SETTINGS, no preface
}

const (
	typeSettings        = 0x4
	flagAck             = 0x1
	settingHeaderTable  = 0x1
	maxSettingsFrameLen = 6 * 64 // far more settings than HTTP/2 defines
)

// Feed takes the next bytes of the peer's direction and returns the last
// SETTINGS_HEADER_TABLE_SIZE they completed, with ok false for none.
func (s *PeerSettings) Feed(p []byte) (size uint32, ok bool) {
	for len(p) > 0 {
		switch {
		case s.skip > 0:
			n := min(s.skip, len(p))
			s.skip -= n
			p = p[n:]
		case s.want > 0:
			n := min(s.want, len(p))
			s.payload = append(s.payload, p[:n]...)
			s.want -= n
			p = p[n:]
			if s.want == 0 {
				if v, found := headerTableSize(s.payload); found {
					size, ok = v, true
				}
				s.payload = s.payload[:0]
			}
		default:
			n := copy(s.hdr[s.have:], p)
			s.have += n
			p = p[n:]
			if s.have < frameHeaderLen {
				return size, ok
			}
			s.have = 0
			length := int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			if s.hdr[3] == typeSettings && s.hdr[4]&flagAck == 0 && length <= maxSettingsFrameLen {
				s.want = length
			} else {
				s.skip = length
			}
		}
	}
	return size, ok
}

// headerTableSize finds SETTINGS_HEADER_TABLE_SIZE in a SETTINGS payload
// (6-byte entries; the last of several wins, RFC 9113 6.5.3).
func headerTableSize(b []byte) (v uint32, found bool) {
	for ; len(b) >= 6; b = b[6:] {
		if uint16(b[0])<<8|uint16(b[1]) == settingHeaderTable {
			v, found = uint32(b[2])<<24|uint32(b[3])<<16|uint32(b[4])<<8|uint32(b[5]), true
		}
	}
	return v, found
}
