package verify

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Null is the canonical form of SQL NULL.
const Null = "NULL"

// Canonical returns a JSON value's canonical form for a column of Feldera
// type ct: numbers by value, strings quoted, timestamps in UTC with
// trailing zero fractions removed, UUIDs in lower case, binary as hex,
// JSON objects with sorted keys. It accepts both what pgfeldera sends and
// what Feldera prints, and rejects a value that is neither. The result is
// readable: it is what a difference report shows.
func Canonical(ct feldera.ColumnType, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Null, nil
	}
	switch ct.Type {
	case "BOOLEAN":
		if s := string(raw); s == "true" || s == "false" {
			return s, nil
		}
		return "", fmt.Errorf("%s is not a boolean", raw)
	case "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT":
		r, err := number(raw)
		if err != nil || !r.IsInt() {
			return "", fmt.Errorf("%s is not an integer", raw)
		}
		return r.Num().String(), nil
	case "DECIMAL":
		r, err := number(raw)
		if err != nil {
			return "", err
		}
		return r.RatString(), nil
	case "REAL", "DOUBLE":
		s, err := unquoteMaybe(raw)
		if err != nil {
			return "", err
		}
		bits := 64
		if ct.Type == "REAL" {
			bits = 32
		}
		f, err := strconv.ParseFloat(s, bits)
		if err != nil {
			return "", fmt.Errorf("%s is not a number", raw)
		}
		return strconv.FormatFloat(f, 'g', -1, bits), nil
	case "VARCHAR", "CHAR":
		s, err := stringValue(raw)
		if err != nil {
			return "", err
		}
		if ct.Type == "CHAR" {
			s = strings.TrimRight(s, " ") // blank padding is not significant in CHAR(n)
		}
		return strconv.Quote(s), nil
	case "UUID":
		s, err := stringValue(raw)
		if err != nil {
			return "", err
		}
		h := strings.ToLower(strings.ReplaceAll(s, "-", ""))
		if _, err := hex.DecodeString(h); err != nil || len(h) != 32 {
			return "", fmt.Errorf("%q is not a UUID", s)
		}
		return strconv.Quote(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]), nil
	case "DATE":
		s, err := stringValue(raw)
		if err != nil {
			return "", err
		}
		d, err := time.Parse("2006-01-02", s)
		if err != nil {
			return "", fmt.Errorf("%q is not a date", s)
		}
		return strconv.Quote(d.Format("2006-01-02")), nil
	case "TIME":
		s, err := stringValue(raw)
		if err != nil {
			return "", err
		}
		t, err := time.Parse("15:04:05.999999999", s)
		if err != nil {
			return "", fmt.Errorf("%q is not a time", s)
		}
		return strconv.Quote(t.Format("15:04:05.999999999")), nil
	case "TIMESTAMP", "TIMESTAMP_TZ":
		s, err := stringValue(raw)
		if err != nil {
			return "", err
		}
		t, err := parseTimestamp(s)
		if err != nil {
			return "", err
		}
		return strconv.Quote(t.UTC().Format("2006-01-02 15:04:05.999999999")), nil
	case "BINARY", "VARBINARY":
		return canonicalBinary(raw)
	case "ARRAY":
		return canonicalArray(ct, raw)
	}
	return canonicalJSON(raw)
}

// canonicalBinary writes bytes as lower-case hex, from a hex string (\x
// prefix optional) or a JSON byte array, so both forms compare equal.
func canonicalBinary(raw json.RawMessage) (string, error) {
	if raw[0] == '"' {
		s, err := stringValue(raw)
		if err != nil {
			return "", err
		}
		return "x" + strconv.Quote(strings.ToLower(strings.TrimPrefix(s, `\x`))), nil
	}
	var bs []int
	if err := json.Unmarshal(raw, &bs); err != nil {
		return "", fmt.Errorf("%.60s is not a byte array", raw)
	}
	b := make([]byte, len(bs))
	for i, v := range bs {
		if v < 0 || v > 255 {
			return "", fmt.Errorf("byte %d out of range", v)
		}
		b[i] = byte(v)
	}
	return "x" + strconv.Quote(hex.EncodeToString(b)), nil
}

// canonicalArray writes each element in its component type's canonical
// form, so arrays compare element by element.
func canonicalArray(ct feldera.ColumnType, raw json.RawMessage) (string, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return "", fmt.Errorf("%.60s is not an array", raw)
	}
	comp := feldera.ColumnType{Type: "VARIANT", Nullable: true}
	if ct.Component != nil {
		comp = *ct.Component
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range elems {
		v, err := Canonical(comp, e)
		if err != nil {
			return "", fmt.Errorf("array element %d: %w", i+1, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(v)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// canonicalJSON writes VARIANT, MAP and anything else as the JSON value
// with sorted keys and numbers as written.
func canonicalJSON(raw json.RawMessage) (string, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}

// number reads a JSON number, or a string holding one (DECIMAL is sent as
// a string to keep its precision).
func number(raw json.RawMessage) (*big.Rat, error) {
	s, err := unquoteMaybe(raw)
	if err != nil {
		return nil, err
	}
	r, ok := new(big.Rat).SetString(strings.TrimSpace(s))
	if !ok {
		return nil, fmt.Errorf("%s is not a number", raw)
	}
	return r, nil
}

func unquoteMaybe(raw json.RawMessage) (string, error) {
	if raw[0] != '"' {
		return string(raw), nil
	}
	return stringValue(raw)
}

func stringValue(raw json.RawMessage) (string, error) {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", fmt.Errorf("%.60s is not a string", raw)
	}
	return s, nil
}

// parseTimestamp reads "YYYY-MM-DD HH:MM:SS[.f]" with a space or a T, and
// an optional Z or ±HH[:MM] offset; without one the value is UTC.
func parseTimestamp(s string) (time.Time, error) {
	for _, layout := range []string{
		"2006-01-02 15:04:05.999999999",
		"2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02T15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07",
		"2006-01-02T15:04:05.999999999Z07",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a timestamp", s)
}
