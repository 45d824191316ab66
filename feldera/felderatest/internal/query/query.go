package query

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/sqlvalue"
)

var (
	reSelect = regexp.MustCompile(`(?is)^\s*SELECT\s+(.+?)\s+FROM\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)\s*(?:ORDER\s+BY\s+(.+?))?\s*;?\s*$`)
	reCount  = regexp.MustCompile(`(?i)^count\(\s*\*\s*\)$`)
)

// Select is a query the double answers:
// SELECT cols|*|COUNT(*) FROM t [ORDER BY ...].
type Select struct {
	Cols  string // the columns as written, trimmed
	Table string // canonical
}

// Parse reads an ad-hoc query; ok is false when the double does not
// answer it.
func Parse(sqlText string) (q Select, ok bool) {
	m := reSelect.FindStringSubmatch(sqlText)
	if m == nil {
		return q, false
	}
	return Select{Cols: strings.TrimSpace(m[1]), Table: feldera.TableIdent(m[2])}, true
}

// Count reports whether the query is SELECT COUNT(*).
func (q Select) Count() bool { return reCount.MatchString(q.Cols) }

// Fields are the fields of rel the query selects; missing names the first
// column rel does not have.
func (q Select) Fields(rel feldera.Relation) (fields []feldera.Field, missing string, ok bool) {
	cols := q.Cols
	if cols == "*" {
		fields = rel.Fields
	} else {
		for _, c := range strings.Split(cols, ",") {
			n := feldera.TableIdent(strings.TrimSpace(c))
			f, ok := rel.Field(n)
			if !ok {
				return nil, n, false
			}
			fields = append(fields, f)
		}
	}
	return fields, "", true
}

// WriteRow prints a row as /query?format=json does: one JSON object of
// the fields, and a newline.
func WriteRow(b *bytes.Buffer, fields []feldera.Field, row map[string]json.RawMessage) {
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(f.CanonicalName()))
		b.WriteByte(':')
		b.Write(value(f.ColumnType, row[f.CanonicalName()]))
	}
	b.WriteString("}\n")
}

// value prints a stored value the way /query?format=json does:
// arrow_json's line-delimited writer over the Arrow type Feldera gives the
// column (crates/adapters/src/adhoc/executor.rs, stream_json_query;
// crates/adapters/src/format/parquet.rs, relation_to_arrow_fields;
// arrow-json 58.3 writer/encoder.rs, arrow-cast display.rs). Stored values
// are in sqlvalue.Normalize's canonical form.
func value(ct feldera.ColumnType, v json.RawMessage) json.RawMessage {
	if len(v) == 0 || string(v) == "null" {
		return json.RawMessage("null") // explicit nulls
	}
	switch ct.Type {
	case "REAL", "DOUBLE":
		return floatValue(ct, v)
	case "BINARY", "VARBINARY":
		return binaryValue(v)
	case "TIMESTAMP", "TIMESTAMP_TZ":
		return timestampValue(ct, v)
	case "TIME":
		return timeValue(v)
	case "VARIANT":
		return jsonString(string(v)) // Utf8: the value's JSON text
	case "ARRAY":
		return arrayValue(ct, v)
	case "VARCHAR", "CHAR", "UUID", "DATE":
		var s string
		if json.Unmarshal(v, &s) != nil {
			return v
		}
		return jsonString(s)
	}
	return v // BOOLEAN, integers, DECIMAL (a bare number at its scale)
}

// floatValue is value for REAL (Float32) and DOUBLE (Float64).
func floatValue(ct feldera.ColumnType, v json.RawMessage) json.RawMessage {
	bits := 64
	if ct.Type == "REAL" {
		bits = 32
	}
	f, err := strconv.ParseFloat(string(v), bits)
	if err != nil {
		return v
	}
	return json.RawMessage(lexicalFloat(f, bits))
}

// binaryValue is value for BINARY and VARBINARY.
func binaryValue(v json.RawMessage) json.RawMessage {
	var ns []int
	if json.Unmarshal(v, &ns) != nil {
		return v
	}
	b := make([]byte, len(ns))
	for i, n := range ns {
		b[i] = byte(n)
	}
	return sqlvalue.MustJSON(hex.EncodeToString(b)) // LargeBinary: lowercase hex
}

// timestampValue is value for TIMESTAMP and TIMESTAMP_TZ.
func timestampValue(ct feldera.ColumnType, v json.RawMessage) json.RawMessage {
	var s string
	if json.Unmarshal(v, &s) != nil {
		return v
	}
	t, err := sqlvalue.ParseTimestamp(s)
	if err != nil {
		return v
	}
	// Timestamp(µs): chrono's NaiveDateTime Debug, 'T' and no zone,
	// a fraction of 3 or 6 digits when there is one.
	out := t.Format("2006-01-02T15:04:05") + chronoFraction(t.Nanosecond(), 6)
	if ct.Type == "TIMESTAMP_TZ" {
		out += "Z"
	}
	return sqlvalue.MustJSON(out)
}

// timeValue is value for TIME.
func timeValue(v json.RawMessage) json.RawMessage {
	var s string
	if json.Unmarshal(v, &s) != nil {
		return v
	}
	t, err := time.Parse("15:04:05.999999999", s)
	if err != nil {
		return v
	}
	return sqlvalue.MustJSON(t.Format("15:04:05") + chronoFraction(t.Nanosecond(), 9)) // Time64(ns)
}

// arrayValue is value for ARRAY: each element as the component type
// (VARIANT when the column does not say).
func arrayValue(ct feldera.ColumnType, v json.RawMessage) json.RawMessage {
	var elems []json.RawMessage
	if json.Unmarshal(v, &elems) != nil {
		return v
	}
	comp := feldera.ColumnType{Type: "VARIANT", Nullable: true}
	if ct.Component != nil {
		comp = *ct.Component
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(value(comp, e))
	}
	b.WriteByte(']')
	return b.Bytes()
}

// chronoFraction is chrono's fraction of a second: none when zero, else
// the fewest of 3, 6 or 9 digits that hold it, up to max.
func chronoFraction(ns, max int) string {
	switch {
	case ns == 0:
		return ""
	case ns%1_000_000 == 0:
		return fmt.Sprintf(".%03d", ns/1_000_000)
	case ns%1_000 == 0 || max == 6:
		return fmt.Sprintf(".%06d", ns/1_000)
	}
	return fmt.Sprintf(".%09d", ns)
}

// lexicalFloat is arrow_json's float text (lexical-core, trim_floats off):
// the shortest digits that round-trip; positional with at least one
// fractional digit when the decimal exponent is within -5..9, else
// d.ddde±x; NaN and infinities print as null.
func lexicalFloat(f float64, bits int) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "null"
	}
	e := strconv.FormatFloat(f, 'e', -1, bits) // -d.ddde±xx
	mant, exp, _ := strings.Cut(e, "e")
	x, _ := strconv.Atoi(exp)
	if x < -5 || x > 9 {
		if !strings.Contains(mant, ".") {
			mant += ".0"
		}
		return mant + "e" + strconv.Itoa(x)
	}
	s := strconv.FormatFloat(f, 'f', -1, bits)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// jsonString writes a JSON string as serde_json does: no HTML escaping,
// U+2028 and U+2029 as they are.
func jsonString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out := bytes.TrimRight(b.Bytes(), "\n")
	out = bytes.ReplaceAll(out, []byte(`\u2028`), []byte("\u2028"))
	out = bytes.ReplaceAll(out, []byte(`\u2029`), []byte("\u2029"))
	return out
}
