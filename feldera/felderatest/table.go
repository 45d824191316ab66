package felderatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/sqlvalue"
	"github.com/pgfeldera/pgfeldera/internal/jsonscan"
)

// table holds the state of one Feldera table: by key for a PRIMARY KEY
// table, as a multiset of whole rows otherwise.
type table struct {
	rel   feldera.Relation
	pk    []int                        // field indexes of the key, nil when keyless
	rows  map[string][]json.RawMessage // key → row (PK) or row → row (keyless)
	count map[string]int               // keyless: row → multiplicity

	orderIdx int                // the Config.OrderColumn field, -1 when none
	highest  map[string]float64 // key → the highest OrderColumn value applied
}

func newTable(rel feldera.Relation) (*table, error) {
	t := &table{rel: rel, rows: map[string][]json.RawMessage{}, count: map[string]int{}}
	for _, k := range rel.PrimaryKey {
		idx := -1
		for i, f := range rel.Fields {
			if f.CanonicalName() == k {
				idx = i
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("felderatest: table %s: primary key column %q is not a field", rel.Name, k)
		}
		t.pk = append(t.pk, idx)
	}
	return t, nil
}

func (t *table) watchOrder(column string) {
	t.orderIdx = -1
	if column == "" || !t.keyed() {
		return
	}
	for i, f := range t.rel.Fields {
		if f.CanonicalName() == feldera.TableIdent(column) {
			t.orderIdx = i
			t.highest = map[string]float64{}
		}
	}
}

// inOrder records an insert's OrderColumn value and reports whether it is
// at least every value applied before for its key.
func (t *table) inOrder(o op) bool {
	if t.orderIdx < 0 || o.kind != 'i' {
		return true
	}
	var v float64
	raw := bytes.Trim(o.row[t.orderIdx], `"`)
	if len(raw) == 0 || string(raw) == "null" || json.Unmarshal(raw, &v) != nil {
		return true // NULL or not a number: nothing to compare
	}
	k := rowKey(o.row, t.pk)
	if prev, ok := t.highest[k]; ok && v < prev {
		return false
	}
	t.highest[k] = v
	return true
}

func (t *table) keyed() bool { return len(t.pk) > 0 }

func (t *table) queryable() bool { return t.keyed() || t.rel.Materialized }

// op is one parsed command.
type op struct {
	kind byte // 'd' delete, 'i' insert, 'u' update
	row  []json.RawMessage
	set  []bool // update: which fields were given
}

func rowKey(vals []json.RawMessage, idx []int) string {
	var b strings.Builder
	for n, i := range idx {
		if n > 0 {
			b.WriteByte(0)
		}
		b.Write(vals[i])
	}
	return b.String()
}

func (t *table) allIdx() []int {
	idx := make([]int, len(t.rel.Fields))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// apply runs one command and reports whether a keyless delete missed.
func (t *table) apply(o op) (missed bool) {
	switch {
	case t.keyed() && o.kind == 'i':
		t.rows[rowKey(o.row, t.pk)] = o.row
	case t.keyed() && o.kind == 'd':
		delete(t.rows, rowKey(o.row, t.pk))
	case t.keyed() && o.kind == 'u':
		k := rowKey(o.row, t.pk)
		cur, ok := t.rows[k]
		if !ok {
			return false // an update to a missing key is ignored
		}
		next := append([]json.RawMessage(nil), cur...)
		for i, given := range o.set {
			if given {
				next[i] = o.row[i]
			}
		}
		t.rows[k] = next
	case o.kind == 'i':
		k := rowKey(o.row, t.allIdx())
		t.rows[k] = o.row
		t.count[k]++
	case o.kind == 'd':
		k := rowKey(o.row, t.allIdx())
		if t.count[k] == 0 {
			return true // undefined in Feldera: flagged by the double
		}
		if t.count[k]--; t.count[k] == 0 {
			delete(t.count, k)
			delete(t.rows, k)
		}
	}
	return false
}

func (t *table) clear() {
	t.rows = map[string][]json.RawMessage{}
	t.count = map[string]int{}
}

// Row is one row as the double holds it: canonical field name → canonical
// JSON value.
type Row map[string]json.RawMessage

// String renders the row as JSON with sorted keys.
func (r Row) String() string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(sqlvalue.MustJSON(k))
		b.WriteByte(':')
		b.Write(r[k])
	}
	b.WriteByte('}')
	return b.String()
}

func (t *table) snapshot() []Row {
	keys := make([]string, 0, len(t.rows))
	for k := range t.rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Row
	for _, k := range keys {
		vals := t.rows[k]
		n := 1
		if !t.keyed() {
			n = t.count[k]
		}
		for ; n > 0; n-- {
			r := Row{}
			for i, f := range t.rel.Fields {
				r[f.CanonicalName()] = vals[i]
			}
			out = append(out, r)
		}
	}
	return out
}

// parseRecord reads a record (object or positional array) for a command.
// keyOnly: a delete on a keyed table needs only the key columns.
func (t *table) parseRecord(raw json.RawMessage, kind byte) ([]json.RawMessage, []bool, error) {
	fields := t.rel.Fields
	vals := make([]json.RawMessage, len(fields))
	given := make([]bool, len(fields))
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '[':
		var arr []json.RawMessage
		if err := json.Unmarshal(raw, &arr); err != nil {
			return nil, nil, err
		}
		if len(arr) < len(fields) {
			return nil, nil, fmt.Errorf("invalid length %d, expected %d columns", len(arr), len(fields))
		}
		for i := range fields {
			vals[i], given[i] = arr[i], true
		}
	case len(raw) > 0 && raw[0] == '{':
		obj, err := members(raw, len(fields))
		if err != nil {
			return nil, nil, err
		}
		for _, m := range obj {
			i, err := t.fieldIndex(m.Key)
			if err != nil {
				return nil, nil, err
			}
			if i >= 0 {
				vals[i], given[i] = m.Value, true
			}
		}
	default:
		return nil, nil, fmt.Errorf("invalid type: %s, expected a record", sqlvalue.Describe(raw))
	}
	keyOnly := kind == 'd' && t.keyed()
	for i, f := range fields {
		if keyOnly && !t.isKey(i) {
			vals[i] = json.RawMessage("null")
			continue
		}
		if !given[i] {
			if kind == 'u' {
				if t.isKey(i) {
					return nil, nil, fmt.Errorf("missing field `%s`", f.Name)
				}
				continue
			}
			switch {
			case f.Default != nil:
				vals[i] = defaultJSON(*f.Default)
			case f.ColumnType.Nullable:
				vals[i] = json.RawMessage("null")
			default:
				return nil, nil, fmt.Errorf("missing field `%s`", f.Name)
			}
		}
		n, err := sqlvalue.Normalize(f.ColumnType, vals[i])
		if err != nil {
			return nil, nil, &fieldError{field: f.Name, err: err}
		}
		vals[i] = n
	}
	return vals, given, nil
}

// members splits a record object, through jsonscan, or encoding/json
// where jsonscan does not take it on (the last of a repeated key wins in
// both).
func members(raw []byte, n int) ([]jsonscan.Member, error) {
	if ms, ok := jsonscan.Object(raw, make([]jsonscan.Member, 0, n)); ok {
		return ms, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	ms := make([]jsonscan.Member, 0, len(obj))
	for k, v := range obj {
		ms = append(ms, jsonscan.Member{Key: k, Value: v})
	}
	// In key order, so that which of two bad fields is named does not
	// depend on map order.
	sort.Slice(ms, func(i, j int) bool { return ms[i].Key < ms[j].Key })
	return ms, nil
}

type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return fmt.Sprintf("field %s: %v", e.field, e.err) }

func (t *table) isKey(i int) bool {
	for _, k := range t.pk {
		if k == i {
			return true
		}
	}
	return false
}

// fieldIndex matches a JSON key like Feldera does: exact for a quoted
// (case-sensitive) field, case-insensitive for an unquoted one; an unknown
// key is ignored (-1).
func (t *table) fieldIndex(key string) (int, error) {
	for i, f := range t.rel.Fields {
		if f.CaseSensitive && f.Name == key {
			return i, nil
		}
	}
	low := strings.ToLower(key)
	for i, f := range t.rel.Fields {
		if !f.CaseSensitive && f.CanonicalName() == low {
			return i, nil
		}
	}
	for _, f := range t.rel.Fields {
		if f.CaseSensitive && strings.EqualFold(f.Name, key) {
			return -1, fmt.Errorf("incorrect case-sensitive field name: expected: %s, found: %s", f.Name, key)
		}
	}
	return -1, nil
}

func defaultJSON(sql string) json.RawMessage {
	sql = strings.TrimSpace(sql)
	if strings.HasPrefix(sql, "'") && strings.HasSuffix(sql, "'") && len(sql) >= 2 {
		return sqlvalue.MustJSON(strings.ReplaceAll(sql[1:len(sql)-1], "''", "'"))
	}
	if strings.EqualFold(sql, "null") {
		return json.RawMessage("null")
	}
	return json.RawMessage(sql)
}
