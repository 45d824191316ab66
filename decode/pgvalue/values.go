package pgvalue

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Postgres type OIDs the decoder understands (pg_type.dat).
const (
	OIDBool        = 16
	OIDBytea       = 17
	OIDChar        = 18
	OIDName        = 19
	OIDInt8        = 20
	OIDInt2        = 21
	OIDInt4        = 23
	OIDText        = 25
	OIDOID         = 26
	OIDJSON        = 114
	OIDFloat4      = 700
	OIDFloat8      = 701
	OIDBpchar      = 1042
	OIDVarchar     = 1043
	OIDDate        = 1082
	OIDTime        = 1083
	OIDTimestamp   = 1114
	OIDTimestamptz = 1184
	OIDTimetz      = 1266
	OIDNumeric     = 1700
	OIDUUID        = 2950
	OIDJSONB       = 3802
)

// typeNames names the supported scalar types; arrayOf maps array type OIDs
// to their element OIDs.
var typeNames = map[uint32]string{
	OIDBool: "bool", OIDBytea: "bytea", OIDChar: "char", OIDName: "name", OIDInt8: "int8",
	OIDInt2: "int2", OIDInt4: "int4", OIDText: "text", OIDOID: "oid", OIDJSON: "json",
	OIDFloat4: "float4", OIDFloat8: "float8", OIDBpchar: "bpchar", OIDVarchar: "varchar",
	OIDDate: "date", OIDTime: "time", OIDTimestamp: "timestamp", OIDTimestamptz: "timestamptz",
	OIDTimetz: "timetz", OIDNumeric: "numeric", OIDUUID: "uuid", OIDJSONB: "jsonb",
}

var arrayOf = map[uint32]uint32{
	1000: OIDBool, 1001: OIDBytea, 1002: OIDChar, 1003: OIDName, 1016: OIDInt8, 1005: OIDInt2,
	1007: OIDInt4, 1009: OIDText, 1028: OIDOID, 199: OIDJSON, 1021: OIDFloat4, 1022: OIDFloat8,
	1014: OIDBpchar, 1015: OIDVarchar, 1182: OIDDate, 1183: OIDTime, 1115: OIDTimestamp,
	1185: OIDTimestamptz, 1270: OIDTimetz, 1231: OIDNumeric, 2951: OIDUUID, 3807: OIDJSONB,
}

// TypeName returns a readable name for a type OID ("" when unknown).
func TypeName(oid uint32) string {
	if n, ok := typeNames[oid]; ok {
		return n
	}
	if e, ok := arrayOf[oid]; ok {
		return typeNames[e] + "[]"
	}
	return ""
}

// Supported reports whether a Postgres type OID has an encoder at all.
func Supported(oid uint32) bool {
	_, s := typeNames[oid]
	_, a := arrayOf[oid]
	return s || a
}

// Encoder appends the Feldera JSON encoding of a Postgres text value.
type Encoder func(dst, text []byte) ([]byte, error)

// ErrNoEncoding means a (Postgres type, Feldera type) pair has no faithful
// encoding.
var ErrNoEncoding = errors.New("no faithful encoding")

// EncoderFor returns the encoder for a built-in Postgres type (no typmod)
// written into a Feldera column type. Plan is the general form.
func EncoderFor(oid uint32, ft feldera.ColumnType) (Encoder, error) {
	return Plan(oid, -1, ft, nil)
}

// Unrepresentable is a valid Postgres value that a Feldera column cannot
// hold: infinity, a BC date, a year past 9999, NaN. UNREPRESENTABLE_VALUES
// decides whether it is refused or delivered as NULL into a nullable column.
type Unrepresentable struct {
	Value string
	Why   string
	NaN   bool // NaN or ±Infinity of a float or numeric: JSON has no form for it
}

func (e *Unrepresentable) Error() string { return fmt.Sprintf("%s %q", e.Why, e.Value) }

// builtinEncoder chooses the encoder of a built-in scalar type.
func builtinEncoder(oid uint32, typmod int32, ft feldera.ColumnType) (Encoder, error) {
	t := ft.Type
	switch oid {
	case OIDBool:
		switch t {
		case "BOOLEAN", "VARIANT":
			return encBool, nil
		}
	case OIDInt2, OIDInt4, OIDInt8, OIDOID:
		if intFits(oid, t) {
			return encInteger, nil
		}
		switch t {
		case "DECIMAL":
			return intDecimal(oid, ft), nil
		case "VARCHAR", "CHAR":
			return encString, nil
		case "VARIANT":
			return encInteger, nil
		}
	case OIDFloat4, OIDFloat8:
		switch t {
		case "DOUBLE", "VARIANT":
			return encFloat, nil
		case "REAL":
			if oid == OIDFloat4 {
				return encFloat, nil
			}
		}
	case OIDNumeric:
		switch t {
		case "DECIMAL":
			return numericDecimal(typmod, ft)
		case "VARCHAR", "CHAR":
			return encNumericString, nil
		case "DOUBLE", "REAL", "VARIANT":
			return encNumericNumber, nil
		}
	case OIDText, OIDVarchar, OIDBpchar, OIDName, OIDChar:
		switch t {
		case "VARCHAR", "CHAR", "VARIANT":
			return encString, nil
		}
	case OIDUUID:
		switch t {
		case "UUID", "VARCHAR", "CHAR", "VARIANT":
			return encString, nil
		}
	case OIDDate:
		switch t {
		case "DATE":
			return encDate, nil
		case "VARCHAR":
			return encString, nil
		}
	case OIDTime:
		switch t {
		case "TIME":
			return encTime, nil
		case "VARCHAR":
			return encString, nil
		}
	case OIDTimetz:
		switch t {
		case "TIME":
			return encTimetzUTC, nil
		case "VARCHAR":
			return encString, nil
		}
	case OIDTimestamp:
		switch t {
		case "TIMESTAMP":
			return encTimestamp, nil
		case "VARCHAR":
			return encString, nil
		}
	case OIDTimestamptz:
		switch t {
		case "TIMESTAMP", "TIMESTAMP_TZ":
			return encTimestamptz, nil
		case "VARCHAR":
			return encString, nil
		}
	case OIDJSON, OIDJSONB:
		switch t {
		case "VARIANT":
			return encJSONInline, nil
		case "VARCHAR":
			return encString, nil
		}
	case OIDBytea:
		switch t {
		case "BINARY", "VARBINARY":
			return encBytea, nil
		}
	}
	return nil, ErrNoEncoding
}

func intFits(oid uint32, t string) bool {
	width := map[uint32]int{OIDInt2: 16, OIDInt4: 32, OIDInt8: 64, OIDOID: 33}[oid] // oid is unsigned 32
	switch t {
	case "SMALLINT":
		return width <= 16
	case "INTEGER":
		return width <= 32
	case "BIGINT":
		return true
	case "DOUBLE":
		return width <= 33
	case "UINTEGER":
		return oid == OIDOID
	case "UBIGINT":
		return oid == OIDOID
	}
	return false
}

func encBool(dst, s []byte) ([]byte, error) {
	switch string(s) {
	case "t", "true":
		return append(dst, "true"...), nil
	case "f", "false":
		return append(dst, "false"...), nil
	}
	return dst, fmt.Errorf("invalid boolean %q", s)
}

func encInteger(dst, s []byte) ([]byte, error) {
	if !isInteger(s) {
		return dst, fmt.Errorf("invalid integer %q", s)
	}
	return append(dst, s...), nil
}

func isInteger(s []byte) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isJSONNumber checks the JSON number grammar: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?
func isJSONNumber(s []byte) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// isDecimal checks Postgres numeric output: [-]digits[.digits].
func isDecimal(s []byte) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	digits, dot := 0, false
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits > 0
}

func isNonFinite(s []byte) bool {
	switch string(s) {
	case "NaN", "Infinity", "-Infinity", "inf", "-inf", "nan":
		return true
	}
	return false
}

func nonFinite(s []byte) error {
	return &Unrepresentable{Value: string(s), Why: "JSON and Feldera have no form for", NaN: true}
}

// encFloat: JSON has no NaN or infinity. They are Unrepresentable: a
// nullable column takes null for them, a NOT NULL one is a refusal.
func encFloat(dst, s []byte) ([]byte, error) {
	if isNonFinite(s) {
		return dst, nonFinite(s)
	}
	if !isJSONNumber(s) {
		return dst, fmt.Errorf("invalid float %q", s)
	}
	return append(dst, s...), nil
}

// encNumericString keeps the exact digits: DECIMAL as a JSON string.
func encNumericString(dst, s []byte) ([]byte, error) {
	if isNonFinite(s) {
		return dst, nonFinite(s)
	}
	if !isDecimal(s) {
		return dst, fmt.Errorf("invalid numeric %q", s)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), nil
}

func encNumericNumber(dst, s []byte) ([]byte, error) {
	if isNonFinite(s) {
		return dst, nonFinite(s)
	}
	if !isJSONNumber(s) {
		return dst, fmt.Errorf("invalid numeric %q", s)
	}
	return append(dst, s...), nil
}

const hexDigits = "0123456789abcdef"

// encString writes a JSON string. Invalid UTF-8 is an error: a database in
// another encoding would otherwise be mangled silently.
func encString(dst, s []byte) ([]byte, error) {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			return dst, fmt.Errorf("invalid UTF-8 in text value")
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), nil
}

func encJSONInline(dst, s []byte) ([]byte, error) {
	if !validJSON(s) {
		return dst, fmt.Errorf("invalid JSON value")
	}
	start := len(dst)
	dst = append(dst, bytes.TrimSpace(s)...)
	// One record, one line: the line is what the replay's skip past the
	// progress row counts. A json value may keep newlines (jsonb never
	// does); valid JSON has none inside its strings, so each one is
	// whitespace, and a space serves as well.
	if bytes.ContainsAny(dst[start:], "\r\n") {
		for i := start; i < len(dst); i++ {
			if dst[i] == '\n' || dst[i] == '\r' {
				dst[i] = ' '
			}
		}
	}
	return dst, nil
}

// encBytea reads hex output (\x...) into an array of byte numbers. The
// escape format is refused: bytea_output is pinned to hex, and accepting
// two encodings is how the snapshot and the stream come to disagree.
func encBytea(dst, s []byte) ([]byte, error) {
	if len(s) < 2 || s[0] != '\\' || s[1] != 'x' || len(s)%2 != 0 {
		return dst, fmt.Errorf("bytea value is not in hex format (bytea_output=hex)")
	}
	dst = append(dst, '[')
	for i := 2; i < len(s); i += 2 {
		hi, ok1 := Unhex(s[i])
		lo, ok2 := Unhex(s[i+1])
		if !ok1 || !ok2 {
			return dst, fmt.Errorf("invalid hex in bytea value")
		}
		if i > 2 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(hi<<4|lo), 10)
	}
	return append(dst, ']'), nil
}

// Unhex is the value of the hex digit c; ok is false for any other byte.
func Unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
