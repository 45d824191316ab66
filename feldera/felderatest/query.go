package felderatest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/sqlvalue"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// ---- ad-hoc query ----

var (
	reSelect = regexp.MustCompile(`(?is)^\s*SELECT\s+(.+?)\s+FROM\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)\s*(?:ORDER\s+BY\s+(.+?))?\s*;?\s*$`)
	reCount  = regexp.MustCompile(`(?i)^count\(\s*\*\s*\)$`)
)

func (s *Server) query(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sqlText := q.Get("sql")
	if f := q.Get("format"); f != "json" {
		writeError(w, 400, "InvalidParam", "felderatest: only format=json is supported", nil)
		return
	}
	m := reSelect.FindStringSubmatch(sqlText)
	if m == nil {
		writeError(w, 400, feldera.CodeAdHocQueryError, "Error during query processing: felderatest supports only SELECT cols|*|COUNT(*) FROM t [ORDER BY ...]: "+sqlText, map[string]any{"error": "unsupported query"})
		return
	}
	canon := feldera.TableIdent(m[2])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	t, ok := s.tables[canon]
	if !ok {
		writeError(w, 400, feldera.CodeAdHocQueryError, fmt.Sprintf("Error during query processing: Error during planning: table '%s' not found", canon), map[string]any{"error": "table not found"})
		return
	}
	if !t.Queryable() {
		writeError(w, 400, feldera.CodeAdHocQueryError,
			fmt.Sprintf("Error during query processing: Tried to SELECT from a non-materialized source. Make sure `%s` is configured as materialized: use `with ('materialized' = 'true')` for tables, or `create materialized view` for views", canon),
			map[string]any{"error": "non-materialized source"})
		return
	}
	cols := strings.TrimSpace(m[1])
	w.Header().Set("Content-Type", "application/json")
	rows := table.Snapshot[Row](t)
	if reCount.MatchString(cols) {
		n := len(rows)
		if s.cfg.CountOnly {
			n = s.countOnly[canon] // benchmarks insert distinct keys only
		}
		fmt.Fprintf(w, "{\"count(*)\":%d}\n", n)
		return
	}
	var fields []feldera.Field
	if cols == "*" {
		fields = t.Rel.Fields
	} else {
		for _, c := range strings.Split(cols, ",") {
			n := feldera.TableIdent(strings.TrimSpace(c))
			f, ok := t.Rel.Field(n)
			if !ok {
				w.Header().Del("Content-Type")
				writeError(w, 400, feldera.CodeAdHocQueryError, fmt.Sprintf("Error during query processing: Schema error: No field named %s", n), map[string]any{"error": "no field"})
				return
			}
			fields = append(fields, f)
		}
	}
	var b bytes.Buffer
	for _, row := range rows {
		b.WriteByte('{')
		for i, f := range fields {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(queryString(f.CanonicalName()))
			b.WriteByte(':')
			b.Write(queryValue(f.ColumnType, row[f.CanonicalName()]))
		}
		b.WriteString("}\n")
	}
	w.Write(b.Bytes())
}

// queryValue prints a stored value the way /query?format=json does:
// arrow_json's line-delimited writer over the Arrow type Feldera gives the
// column (crates/adapters/src/adhoc/executor.rs, stream_json_query;
// crates/adapters/src/format/parquet.rs, relation_to_arrow_fields;
// arrow-json 58.3 writer/encoder.rs, arrow-cast display.rs). Stored values
// are in normalize's canonical form.
func queryValue(ct feldera.ColumnType, v json.RawMessage) json.RawMessage {
	if len(v) == 0 || string(v) == "null" {
		return json.RawMessage("null") // explicit nulls
	}
	switch ct.Type {
	case "REAL", "DOUBLE":
		bits := 64
		if ct.Type == "REAL" {
			bits = 32
		}
		f, err := strconv.ParseFloat(string(v), bits)
		if err != nil {
			return v
		}
		return json.RawMessage(lexicalFloat(f, bits))
	case "BINARY", "VARBINARY":
		var ns []int
		if json.Unmarshal(v, &ns) != nil {
			return v
		}
		b := make([]byte, len(ns))
		for i, n := range ns {
			b[i] = byte(n)
		}
		return sqlvalue.MustJSON(hex.EncodeToString(b)) // LargeBinary: lowercase hex
	case "TIMESTAMP", "TIMESTAMP_TZ":
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
	case "TIME":
		var s string
		if json.Unmarshal(v, &s) != nil {
			return v
		}
		t, err := time.Parse("15:04:05.999999999", s)
		if err != nil {
			return v
		}
		return sqlvalue.MustJSON(t.Format("15:04:05") + chronoFraction(t.Nanosecond(), 9)) // Time64(ns)
	case "VARIANT":
		return queryString(string(v)) // Utf8: the value's JSON text
	case "ARRAY":
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
			b.Write(queryValue(comp, e))
		}
		b.WriteByte(']')
		return b.Bytes()
	case "VARCHAR", "CHAR", "UUID", "DATE":
		var s string
		if json.Unmarshal(v, &s) != nil {
			return v
		}
		return queryString(s)
	}
	return v // BOOLEAN, integers, DECIMAL (a bare number at its scale)
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

// queryString writes a JSON string as serde_json does: no HTML escaping,
// U+2028 and U+2029 as they are.
func queryString(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out := bytes.TrimRight(b.Bytes(), "\n")
	out = bytes.ReplaceAll(out, []byte(`\u2028`), []byte("\u2028"))
	out = bytes.ReplaceAll(out, []byte(`\u2029`), []byte("\u2029"))
	return out
}
