package sqlvalue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/jsonscan"
)

var (
	reTime = regexp.MustCompile(`^(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?$`)
	reTS   = regexp.MustCompile(`^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|z|[+-]\d{2}:\d{2})?$`)
	reDate = regexp.MustCompile(`^(\d{1,4})-(\d{1,2})-(\d{1,2})$`)
	reUUID = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)
	reDec  = regexp.MustCompile(`^[+-]?(\d+)(\.(\d*))?([eE][+-]?\d+)?$|^[+-]?\.(\d+)$`)
)

// Normalize checks a JSON value against a Feldera column type, as Feldera's
// JSON input does in the default flavor, and returns its canonical JSON form
// (what the double stores and /query prints). The error text imitates
// Feldera's "invalid type: ..." descriptions.
func Normalize(ct feldera.ColumnType, raw json.RawMessage) (json.RawMessage, error) {
	if v, ok := normPlain(ct, raw); ok {
		return v, nil
	}
	return normalizeAny(ct, raw)
}

// intBits are the integer types' widths.
var intBits = map[string]int{"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64,
	"UTINYINT": 8, "USMALLINT": 16, "UINTEGER": 32, "UBIGINT": 64}

// normPlain is Normalize for the values nearly every record holds, an
// integer in range written canonically and a string encoding/json writes
// back as it is, which Normalize returns unchanged; found without
// decoding them. ok false: normalizeAny decides (FuzzNormalize checks
// that both agree).
func normPlain(ct feldera.ColumnType, raw json.RawMessage) (json.RawMessage, bool) {
	switch ct.Type {
	case "VARCHAR", "CHAR":
		return raw, jsonscan.Plain(raw)
	case "TINYINT", "SMALLINT", "INTEGER", "BIGINT":
		n, err := strconv.ParseInt(string(raw), 10, intBits[ct.Type])
		return raw, err == nil && strconv.FormatInt(n, 10) == string(raw)
	case "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT":
		n, err := strconv.ParseUint(string(raw), 10, intBits[ct.Type])
		return raw, err == nil && strconv.FormatUint(n, 10) == string(raw)
	}
	return nil, false
}

// normalizeAny is Normalize for any value.
func normalizeAny(ct feldera.ColumnType, raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		if !ct.Nullable {
			return nil, fmt.Errorf("invalid type: null, expected a non-null %s", ct.Type)
		}
		return json.RawMessage("null"), nil
	}
	switch ct.Type {
	case "BOOLEAN":
		if string(raw) != "true" && string(raw) != "false" {
			return nil, fmt.Errorf("invalid type: %s, expected a boolean", Describe(raw))
		}
		return raw, nil
	case "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT":
		return normInt(ct.Type, raw)
	case "REAL", "DOUBLE":
		return normFloat(raw)
	case "DECIMAL":
		return normDecimal(ct, raw)
	case "VARCHAR", "CHAR":
		return normString(raw)
	case "BINARY", "VARBINARY":
		return normBinary(raw)
	case "DATE":
		return normDate(raw)
	case "TIME":
		return normTime(raw)
	case "TIMESTAMP", "TIMESTAMP_TZ":
		return normTimestamp(raw)
	case "UUID":
		return normUUID(raw)
	case "VARIANT":
		return canonicalJSON(raw)
	case "ARRAY":
		return normArray(ct, raw)
	case "MAP":
		if raw[0] != '{' {
			return nil, fmt.Errorf("invalid type: %s, expected a map", Describe(raw))
		}
		return canonicalJSON(raw)
	}
	return nil, fmt.Errorf("felderatest: column type %s is not supported by the double", ct.Type)
}

// normFloat is normalizeAny for REAL and DOUBLE.
func normFloat(raw json.RawMessage) (json.RawMessage, error) {
	if raw[0] == '"' || raw[0] == '[' || raw[0] == '{' || raw[0] == 't' || raw[0] == 'f' {
		return nil, fmt.Errorf("invalid type: %s, expected a number", Describe(raw))
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("invalid value %s, expected a finite number", raw)
	}
	return json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64)), nil
}

// normString is normalizeAny for VARCHAR and CHAR.
func normString(raw json.RawMessage) (json.RawMessage, error) {
	if raw[0] != '"' {
		return nil, fmt.Errorf("invalid type: %s, expected a string", Describe(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return MustJSON(s), nil
}

// normBinary is normalizeAny for BINARY and VARBINARY: an array of bytes.
func normBinary(raw json.RawMessage) (json.RawMessage, error) {
	var arr []json.Number
	if raw[0] != '[' || decodeNumbers(raw, &arr) != nil {
		return nil, fmt.Errorf("invalid type: %s, expected a byte array", Describe(raw))
	}
	out := make([]int, len(arr))
	for i, n := range arr {
		v, err := strconv.Atoi(string(n))
		if err != nil || v < 0 || v > 255 {
			return nil, fmt.Errorf("invalid value: %s, expected u8", n)
		}
		out[i] = v
	}
	return MustJSON(out), nil
}

// normDate is normalizeAny for DATE.
func normDate(raw json.RawMessage) (json.RawMessage, error) {
	s, err := str(raw, "a date")
	if err != nil {
		return nil, err
	}
	m := reDate.FindStringSubmatch(s)
	if m == nil {
		return nil, fmt.Errorf("invalid date %q: expected YYYY-MM-DD", s)
	}
	y, _ := strconv.Atoi(m[1])
	mo, _ := strconv.Atoi(m[2])
	d, _ := strconv.Atoi(m[3])
	t := time.Date(y, time.Month(mo), d, 0, 0, 0, 0, time.UTC)
	if t.Year() != y || int(t.Month()) != mo || t.Day() != d {
		return nil, fmt.Errorf("invalid date %q", s)
	}
	return MustJSON(t.Format("2006-01-02")), nil
}

// normTime is normalizeAny for TIME.
func normTime(raw json.RawMessage) (json.RawMessage, error) {
	s, err := str(raw, "a time")
	if err != nil {
		return nil, err
	}
	s = strings.TrimSpace(s)
	m := reTime.FindStringSubmatch(s)
	if m == nil {
		return nil, fmt.Errorf("invalid time %q: expected HH:MM:SS[.fffffffff]", s)
	}
	h, _ := strconv.Atoi(m[1])
	mi, _ := strconv.Atoi(m[2])
	se, _ := strconv.Atoi(m[3])
	if h > 23 || mi > 59 || se > 59 {
		return nil, fmt.Errorf("invalid time %q", s)
	}
	frac := strings.TrimRight(strings.TrimPrefix(m[4], "."), "0")
	out := m[1] + ":" + m[2] + ":" + m[3]
	if frac != "" {
		out += "." + frac
	}
	return MustJSON(out), nil
}

// normTimestamp is normalizeAny for TIMESTAMP and TIMESTAMP_TZ.
func normTimestamp(raw json.RawMessage) (json.RawMessage, error) {
	s, err := str(raw, "a timestamp")
	if err != nil {
		return nil, err
	}
	t, err := ParseTimestamp(s)
	if err != nil {
		return nil, err
	}
	return MustJSON(formatTimestamp(t)), nil
}

// normUUID is normalizeAny for UUID.
func normUUID(raw json.RawMessage) (json.RawMessage, error) {
	s, err := str(raw, "a UUID")
	if err != nil {
		return nil, err
	}
	if !reUUID.MatchString(s) {
		return nil, fmt.Errorf("invalid UUID %q", s)
	}
	h := strings.ToLower(strings.ReplaceAll(s, "-", ""))
	return MustJSON(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]), nil
}

// normArray is normalizeAny for ARRAY: each element normalized as the
// component type (VARIANT when the column does not say).
func normArray(ct feldera.ColumnType, raw json.RawMessage) (json.RawMessage, error) {
	if raw[0] != '[' {
		return nil, fmt.Errorf("invalid type: %s, expected an array", Describe(raw))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, err
	}
	comp := feldera.ColumnType{Type: "VARIANT", Nullable: true}
	if ct.Component != nil {
		comp = *ct.Component
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range elems {
		n, err := Normalize(comp, e)
		if err != nil {
			return nil, fmt.Errorf("array element %d: %w", i, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(n)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

func normInt(typ string, raw json.RawMessage) (json.RawMessage, error) {
	if raw[0] == '"' {
		return nil, fmt.Errorf("invalid type: string %s, expected %s", raw, strings.ToLower(typ))
	}
	n, ok := new(big.Int).SetString(string(raw), 10)
	if !ok {
		return nil, fmt.Errorf("invalid type: %s, expected an integer", Describe(raw))
	}
	bits := uint(intBits[typ])
	var lo, hi *big.Int
	if strings.HasPrefix(typ, "U") {
		lo, hi = big.NewInt(0), new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), bits), big.NewInt(1))
	} else {
		hi = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), bits-1), big.NewInt(1))
		lo = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), bits-1))
	}
	if n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
		return nil, fmt.Errorf("invalid value: integer `%s`, out of range for %s", raw, strings.ToLower(typ))
	}
	return json.RawMessage(n.String()), nil
}

func normDecimal(ct feldera.ColumnType, raw json.RawMessage) (json.RawMessage, error) {
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
	} else if raw[0] == '[' || raw[0] == '{' || raw[0] == 't' || raw[0] == 'f' {
		return nil, fmt.Errorf("invalid type: %s, expected a decimal", Describe(raw))
	}
	if !reDec.MatchString(strings.TrimSpace(s)) {
		return nil, fmt.Errorf("invalid decimal %q", s)
	}
	r, ok := new(big.Rat).SetString(strings.TrimSpace(s))
	if !ok {
		return nil, fmt.Errorf("invalid decimal %q", s)
	}
	p, sc := 28, 0
	if ct.Precision != nil {
		p = *ct.Precision
	}
	if ct.Scale != nil {
		sc = *ct.Scale
	}
	// Truncate toward zero at the scale.
	scaled := new(big.Int).Quo(new(big.Int).Mul(r.Num(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(sc)), nil)), r.Denom())
	digits := strings.TrimPrefix(scaled.String(), "-")
	if len(digits) > p && scaled.Sign() != 0 {
		return nil, fmt.Errorf("decimal number %s is outside the value range of DECIMAL(%d, %d)", s, p, sc)
	}
	neg := scaled.Sign() < 0
	for len(digits) <= sc {
		digits = "0" + digits
	}
	out := digits
	if sc > 0 {
		out = digits[:len(digits)-sc] + "." + digits[len(digits)-sc:]
	}
	if neg {
		out = "-" + out
	}
	return json.RawMessage(out), nil
}

// ParseTimestamp reads a TIMESTAMP or TIMESTAMP_TZ text as Feldera's JSON
// input takes it, truncated to microseconds, in UTC.
func ParseTimestamp(s string) (time.Time, error) {
	m := reTS.FindStringSubmatch(s)
	if m == nil {
		return time.Time{}, fmt.Errorf("invalid timestamp %q: expected YYYY-MM-DD HH:MM:SS[.f][Z|±HH:MM]", s)
	}
	atoi := func(x string) int { n, _ := strconv.Atoi(x); return n }
	ns := 0
	if m[7] != "" {
		frac := (m[7][1:] + "000000000")[:9]
		ns = atoi(frac) / 1000 * 1000 // truncated to microseconds
	}
	loc := time.UTC
	if off := m[8]; off != "" && off != "Z" && off != "z" {
		sign := 1
		if off[0] == '-' {
			sign = -1
		}
		hh, mm := atoi(off[1:3]), atoi(off[4:6])
		if hh > 23 || mm > 59 {
			return time.Time{}, fmt.Errorf("invalid timestamp offset in %q", s)
		}
		loc = time.FixedZone("", sign*(hh*3600+mm*60))
	}
	y, mo, d, h, mi, se := atoi(m[1]), atoi(m[2]), atoi(m[3]), atoi(m[4]), atoi(m[5]), atoi(m[6])
	t := time.Date(y, time.Month(mo), d, h, mi, se, ns, loc)
	if t.Year() != y || int(t.Month()) != mo || t.Day() != d || t.Hour() != h || t.Minute() != mi || t.Second() != se {
		return time.Time{}, fmt.Errorf("invalid timestamp %q", s)
	}
	return t.UTC(), nil
}

func formatTimestamp(t time.Time) string {
	if t.Nanosecond() == 0 {
		return t.Format("2006-01-02T15:04:05")
	}
	return strings.TrimRight(t.Format("2006-01-02T15:04:05.000000"), "0")
}

func str(raw json.RawMessage, what string) (string, error) {
	if raw[0] != '"' {
		return "", fmt.Errorf("invalid type: %s, expected %s string", Describe(raw), what)
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// Describe names a JSON value's kind the way Feldera's "invalid type"
// errors do.
func Describe(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "string " + string(raw)
	case '[':
		return "sequence"
	case '{':
		return "map"
	case 't', 'f':
		return "boolean `" + string(raw) + "`"
	case 'n':
		return "null"
	}
	return "number " + string(raw)
}

func decodeNumbers(raw json.RawMessage, out *[]json.Number) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return d.Decode(out)
}

// canonicalJSON re-encodes any JSON value with sorted object keys and
// numbers kept as written.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// MustJSON is json.Marshal for values that cannot fail to encode.
func MustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
