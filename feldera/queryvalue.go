package feldera

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// What an ad-hoc query prints is not what ingress takes. GET /query with
// format=json writes rows with arrow_json's line-delimited writer, nulls
// explicit (crates/adapters/src/adhoc/executor.rs, stream_json_query),
// over the Arrow types of crates/adapters/src/format/parquet.rs
// (relation_to_arrow_fields). Per Feldera type, where the two differ:
//
//   - BINARY, VARBINARY: a lowercase hex string ("deadbeef"); ingress takes
//     an array of byte numbers;
//   - VARIANT: a string holding the value's JSON text; ingress takes the
//     JSON value inline;
//   - DECIMAL: a bare number with exactly the scale's digits ("12.30");
//     ingress takes it, but through f64 unless it is a string;
//   - TIMESTAMP: "2024-05-13T12:34:56[.fff[fff]]", TIME and DATE as
//     ingress takes them; floats as the shortest round trip ("3.0",
//     "1.0e10"), NaN and infinities as null;
//   - ARRAY and MAP: their elements and values by the same rules.
//
// IngressValue and QueryText turn a printed value back into what ingress
// and Postgres take: keyless retraction sends rows it read back as
// deletes, keyed retraction compares keys it read with Postgres, and
// verify compares what Feldera holds with what pgfeldera sent.

// IngressValue converts a value /query printed for a column of type ct
// into the JSON Feldera's ingress takes for it.
func IngressValue(ct ColumnType, v json.RawMessage) (json.RawMessage, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return json.RawMessage("null"), nil
	}
	switch ct.Type {
	case "BINARY", "VARBINARY":
		b, err := queryBytes(v)
		if err != nil {
			return nil, err
		}
		out := make([]byte, 0, 4*len(b)+2)
		out = append(out, '[')
		for i, x := range b {
			if i > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendUint(out, uint64(x), 10)
		}
		return append(out, ']'), nil
	case "VARIANT":
		var text string
		if v[0] != '"' || json.Unmarshal(v, &text) != nil {
			return nil, fmt.Errorf("VARIANT value %.60s is not the JSON text /query prints", v)
		}
		if !json.Valid([]byte(text)) {
			return nil, fmt.Errorf("VARIANT value %.60q does not hold JSON", text)
		}
		return json.RawMessage(text), nil
	case "DECIMAL":
		if v[0] == '"' {
			return v, nil
		}
		return json.Marshal(string(v)) // exact, not through f64
	case "ARRAY":
		comp := ColumnType{Type: "VARIANT", Nullable: true}
		if ct.Component != nil {
			comp = *ct.Component
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return nil, fmt.Errorf("ARRAY value %.60s is not an array", v)
		}
		var b bytes.Buffer
		b.WriteByte('[')
		for i, e := range elems {
			x, err := IngressValue(comp, e)
			if err != nil {
				return nil, fmt.Errorf("array element %d: %w", i+1, err)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(x)
		}
		b.WriteByte(']')
		return b.Bytes(), nil
	}
	return v, nil
}

// QueryText converts a value /query printed for a key column of type ct
// into text Postgres casts to the column's type; a NULL, an array or a
// structured value cannot be a key to compare.
func QueryText(ct ColumnType, v json.RawMessage) (string, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "", fmt.Errorf("empty value")
	}
	switch ct.Type {
	case "BINARY", "VARBINARY":
		b, err := queryBytes(v)
		if err != nil {
			return "", err
		}
		return `\x` + hex.EncodeToString(b), nil
	case "ARRAY", "MAP", "VARIANT":
		return "", fmt.Errorf("a %s value (%.60s) cannot be compared as a key", ct.Type, v)
	}
	switch v[0] {
	case '"':
		var s string
		err := json.Unmarshal(v, &s)
		return s, err
	case '[', '{', 'n':
		return "", fmt.Errorf("value %.60s cannot be compared as a key", v)
	}
	return string(v), nil
}

// queryBytes reads a BINARY value: the hex string /query prints, or the
// byte array ingress takes (a double or an older Feldera may print it).
func queryBytes(v json.RawMessage) ([]byte, error) {
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, err
		}
		b, err := hex.DecodeString(strings.TrimPrefix(strings.TrimPrefix(s, `\x`), "0x"))
		if err != nil {
			return nil, fmt.Errorf("BINARY value %.60q is not hex", s)
		}
		return b, nil
	}
	var ns []int
	if err := json.Unmarshal(v, &ns); err != nil {
		return nil, fmt.Errorf("BINARY value %.60s is neither hex nor a byte array", v)
	}
	b := make([]byte, len(ns))
	for i, n := range ns {
		if n < 0 || n > 255 {
			return nil, fmt.Errorf("BINARY value %.60s: byte %d out of range", v, n)
		}
		b[i] = byte(n)
	}
	return b, nil
}

// IngressRow converts a /query row (an object keyed by column name) of
// rel into the record ingress takes, field by field.
func (r Relation) IngressRow(row json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(row, &m); err != nil {
		return nil, fmt.Errorf("query row of %s: %w", r.Name, err)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for name, v := range m {
		f, ok := r.Field(name)
		if !ok {
			return nil, fmt.Errorf("query row of %s has column %q, which the table does not have", r.Name, name)
		}
		x, err := IngressValue(f.ColumnType, v)
		if err != nil {
			return nil, fmt.Errorf("column %s of %s: %w", f.Name, r.Name, err)
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		k, _ := json.Marshal(name)
		b.Write(k)
		b.WriteByte(':')
		b.Write(x)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
