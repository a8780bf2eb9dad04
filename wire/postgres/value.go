package postgres

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Type OIDs of the types decoded from the binary format.
const (
	oidBool        = 16
	oidBytea       = 17
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidOID         = 26
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidBPChar      = 1042
	oidVarchar     = 1043
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidUUID        = 2950
	oidJSONB       = 3802
)

// arrayElem maps an array type to its element type.
var arrayElem = map[uint32]uint32{
	1000: oidBool, 1001: oidBytea, 1003: oidName, 1016: oidInt8, 1005: oidInt2, 1007: oidInt4,
	1009: oidText, 1028: oidOID, 199: oidJSON, 1021: oidFloat4, 1022: oidFloat8, 1014: oidBPChar,
	1015: oidVarchar, 1182: oidDate, 1183: oidTime, 1115: oidTimestamp, 1185: oidTimestamptz,
	1231: oidNumeric, 2951: oidUUID, 3807: oidJSONB,
}

// pgEpoch is where PostgreSQL's dates and timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// FormatValue renders one parameter or column value as text for diffs and
// reports: v in format 0 (text) or 1 (binary) of type oid (0: unknown).
// NULL (v nil) is NULL; text types are quoted; a binary value of a type
// it does not know is shown as hex with its length.
func FormatValue(oid uint32, format int16, v []byte) string {
	if v == nil {
		return "NULL"
	}
	if format == 0 {
		switch oid {
		case oidInt2, oidInt4, oidInt8, oidOID, oidFloat4, oidFloat8, oidNumeric, oidBool:
			return string(v)
		}
		return strconv.Quote(string(v))
	}
	if s, ok := binaryValue(oid, v); ok {
		return s
	}
	return fmt.Sprintf("\\x%s (%d bytes)", hex.EncodeToString(v[:min(len(v), 64)]), len(v))
}

func binaryValue(oid uint32, v []byte) (string, bool) {
	be := binary.BigEndian
	switch oid {
	case oidBool:
		if len(v) == 1 {
			return strconv.FormatBool(v[0] != 0), true
		}
	case oidInt2:
		if len(v) == 2 {
			return strconv.Itoa(int(int16(be.Uint16(v)))), true
		}
	case oidInt4:
		if len(v) == 4 {
			return strconv.Itoa(int(int32(be.Uint32(v)))), true
		}
	case oidOID:
		if len(v) == 4 {
			return strconv.FormatUint(uint64(be.Uint32(v)), 10), true
		}
	case oidInt8:
		if len(v) == 8 {
			return strconv.FormatInt(int64(be.Uint64(v)), 10), true
		}
	case oidFloat4:
		if len(v) == 4 {
			return strconv.FormatFloat(float64(math.Float32frombits(be.Uint32(v))), 'g', -1, 32), true
		}
	case oidFloat8:
		if len(v) == 8 {
			return strconv.FormatFloat(math.Float64frombits(be.Uint64(v)), 'g', -1, 64), true
		}
	case oidText, oidVarchar, oidBPChar, oidName, oidJSON:
		return strconv.Quote(string(v)), true
	case oidJSONB:
		if len(v) >= 1 && v[0] == 1 {
			return strconv.Quote(string(v[1:])), true
		}
	case oidBytea:
		return "\\x" + hex.EncodeToString(v), true
	case oidUUID:
		if len(v) == 16 {
			h := hex.EncodeToString(v)
			return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], true
		}
	case oidDate:
		if len(v) == 4 {
			d := int32(be.Uint32(v))
			switch d {
			case math.MaxInt32:
				return "infinity", true
			case math.MinInt32:
				return "-infinity", true
			}
			return pgEpoch.AddDate(0, 0, int(d)).Format("2006-01-02"), true
		}
	case oidTime:
		if len(v) == 8 {
			return (time.Duration(be.Uint64(v)) * time.Microsecond).String(), true
		}
	case oidTimestamp, oidTimestamptz:
		if len(v) == 8 {
			us := int64(be.Uint64(v))
			switch us {
			case math.MaxInt64:
				return "infinity", true
			case math.MinInt64:
				return "-infinity", true
			}
			t := pgEpoch.Add(time.Duration(us/1e6) * time.Second).Add(time.Duration(us%1e6) * time.Microsecond)
			if oid == oidTimestamp {
				return t.Format("2006-01-02 15:04:05.999999"), true
			}
			return t.Format("2006-01-02 15:04:05.999999Z07:00"), true
		}
	case oidNumeric:
		return numeric(v)
	default:
		if elem, ok := arrayElem[oid]; ok {
			return array(elem, v)
		}
	}
	return "", false
}

// numeric decodes the binary numeric format: digit count, weight (in
// base-10000 digits), sign, display scale, then the digits.
func numeric(v []byte) (string, bool) {
	if len(v) < 8 {
		return "", false
	}
	be := binary.BigEndian
	n, weight, sign, scale := int(be.Uint16(v)), int(int16(be.Uint16(v[2:]))), be.Uint16(v[4:]), int(be.Uint16(v[6:]))
	if len(v) != 8+2*n {
		return "", false
	}
	switch sign {
	case 0xC000:
		return "NaN", true
	case 0xD000:
		return "Infinity", true
	case 0xF000:
		return "-Infinity", true
	}
	x := new(big.Int)
	for i := 0; i < n; i++ {
		x.Mul(x, big.NewInt(10000))
		x.Add(x, big.NewInt(int64(be.Uint16(v[8+2*i:]))))
	}
	// x × 10000^(weight-n+1)
	exp := 4 * (weight - n + 1)
	s := x.String()
	if exp >= 0 {
		s += strings.Repeat("0", exp)
		if scale > 0 {
			s += "." + strings.Repeat("0", scale)
		}
	} else {
		frac := -exp
		if len(s) <= frac {
			s = strings.Repeat("0", frac-len(s)+1) + s
		}
		ip, fp := s[:len(s)-frac], s[len(s)-frac:]
		if len(fp) > scale {
			fp = fp[:scale]
		} else {
			fp += strings.Repeat("0", scale-len(fp))
		}
		s = ip
		if fp != "" {
			s += "." + fp
		}
	}
	if sign == 0x4000 {
		s = "-" + s
	}
	return s, true
}

// array decodes the binary array format: dimensions, a has-NULL flag,
// the element type, each dimension's size and lower bound, then the
// elements (each with its length, -1 for NULL).
func array(elem uint32, v []byte) (string, bool) {
	be := binary.BigEndian
	if len(v) < 12 {
		return "", false
	}
	ndim := int(be.Uint32(v))
	if ndim == 0 {
		return "{}", true
	}
	if ndim > 6 || len(v) < 12+8*ndim {
		return "", false
	}
	dims := make([]int, ndim)
	total := 1
	for i := range dims {
		dims[i] = int(int32(be.Uint32(v[12+8*i:])))
		if dims[i] < 0 || dims[i] > len(v) {
			return "", false
		}
		if total *= dims[i]; total > len(v) {
			return "", false
		}
	}
	rest := v[12+8*ndim:]
	elems := make([]string, 0, total)
	for range total {
		if len(rest) < 4 {
			return "", false
		}
		l := int(int32(be.Uint32(rest)))
		rest = rest[4:]
		if l < 0 {
			elems = append(elems, "NULL")
			continue
		}
		if l > len(rest) {
			return "", false
		}
		elems = append(elems, FormatValue(elem, 1, rest[:l]))
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return "", false
	}
	var nest func(d int, e []string) string
	nest = func(d int, e []string) string {
		if d == ndim-1 {
			return "{" + strings.Join(e, ",") + "}"
		}
		step := len(e) / max(dims[d], 1)
		parts := make([]string, dims[d])
		for i := range parts {
			parts[i] = nest(d+1, e[i*step:(i+1)*step])
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return nest(0, elems), true
}
