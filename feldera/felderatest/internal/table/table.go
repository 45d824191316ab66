package table

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/sqlvalue"
	"github.com/pgfeldera/pgfeldera/internal/jsonscan"
)

// Table holds the state of one Feldera table: by key for a PRIMARY KEY
// table, as a multiset of whole rows otherwise.
type Table struct {
	Rel   feldera.Relation
	pk    []int                        // field indexes of the key, nil when keyless
	rows  map[string][]json.RawMessage // key → row (PK) or row → row (keyless)
	count map[string]int               // keyless: row → multiplicity

	orderIdx int                // the Config.OrderColumn field, -1 when none
	highest  map[string]float64 // key → the highest OrderColumn value applied
}

// New makes an empty table of rel.
func New(rel feldera.Relation) (*Table, error) {
	t := &Table{Rel: rel, rows: map[string][]json.RawMessage{}, count: map[string]int{}}
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

// WatchOrder makes InOrder watch column (Config.OrderColumn), if the
// table has a key and that column.
func (t *Table) WatchOrder(column string) {
	t.orderIdx = -1
	if column == "" || !t.Keyed() {
		return
	}
	for i, f := range t.Rel.Fields {
		if f.CanonicalName() == feldera.TableIdent(column) {
			t.orderIdx = i
			t.highest = map[string]float64{}
		}
	}
}

// InOrder records an insert's OrderColumn value and reports whether it is
// at least every value applied before for its key.
func (t *Table) InOrder(o Op) bool {
	if t.orderIdx < 0 || o.Kind != 'i' {
		return true
	}
	var v float64
	raw := bytes.Trim(o.Row[t.orderIdx], `"`)
	if len(raw) == 0 || string(raw) == "null" || json.Unmarshal(raw, &v) != nil {
		return true // NULL or not a number: nothing to compare
	}
	k := rowKey(o.Row, t.pk)
	if prev, ok := t.highest[k]; ok && v < prev {
		return false
	}
	t.highest[k] = v
	return true
}

// Keyed reports whether the table has a PRIMARY KEY.
func (t *Table) Keyed() bool { return len(t.pk) > 0 }

// Queryable reports whether an ad-hoc query may read the table.
func (t *Table) Queryable() bool { return t.Keyed() || t.Rel.Materialized }

// Op is one parsed command.
type Op struct {
	Kind byte // 'd' delete, 'i' insert, 'u' update
	Row  []json.RawMessage
	Set  []bool // update: which fields were given
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

func (t *Table) allIdx() []int {
	idx := make([]int, len(t.Rel.Fields))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// Apply runs one command and reports whether a keyless delete missed.
func (t *Table) Apply(o Op) (missed bool) {
	switch {
	case t.Keyed() && o.Kind == 'i':
		t.rows[rowKey(o.Row, t.pk)] = o.Row
	case t.Keyed() && o.Kind == 'd':
		delete(t.rows, rowKey(o.Row, t.pk))
	case t.Keyed() && o.Kind == 'u':
		k := rowKey(o.Row, t.pk)
		cur, ok := t.rows[k]
		if !ok {
			return false // an update to a missing key is ignored
		}
		next := append([]json.RawMessage(nil), cur...)
		for i, given := range o.Set {
			if given {
				next[i] = o.Row[i]
			}
		}
		t.rows[k] = next
	case o.Kind == 'i':
		k := rowKey(o.Row, t.allIdx())
		t.rows[k] = o.Row
		t.count[k]++
	case o.Kind == 'd':
		k := rowKey(o.Row, t.allIdx())
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

// Clear empties the table.
func (t *Table) Clear() {
	t.rows = map[string][]json.RawMessage{}
	t.count = map[string]int{}
}

// Snapshot is the table's rows, sorted by key, each as an R: canonical
// field name → canonical JSON value.
func Snapshot[R ~map[string]json.RawMessage](t *Table) []R {
	keys := make([]string, 0, len(t.rows))
	for k := range t.rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []R
	for _, k := range keys {
		vals := t.rows[k]
		n := 1
		if !t.Keyed() {
			n = t.count[k]
		}
		for ; n > 0; n-- {
			r := R{}
			for i, f := range t.Rel.Fields {
				r[f.CanonicalName()] = vals[i]
			}
			out = append(out, r)
		}
	}
	return out
}

// ParseRecord reads a record (object or positional array) for a command.
// keyOnly: a delete on a keyed table needs only the key columns.
func (t *Table) ParseRecord(raw json.RawMessage, kind byte) ([]json.RawMessage, []bool, error) {
	vals, given, err := t.recordValues(raw)
	if err != nil {
		return nil, nil, err
	}
	fields := t.Rel.Fields
	keyOnly := kind == 'd' && t.Keyed()
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
			return nil, nil, &FieldError{Field: f.Name, Err: err}
		}
		vals[i] = n
	}
	return vals, given, nil
}

// recordValues reads a record's values, by position or by name, and which
// fields it gave.
func (t *Table) recordValues(raw json.RawMessage) ([]json.RawMessage, []bool, error) {
	fields := t.Rel.Fields
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

// FieldError is a record's bad value, with the field that holds it.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %s: %v", e.Field, e.Err) }

func (t *Table) isKey(i int) bool {
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
func (t *Table) fieldIndex(key string) (int, error) {
	for i, f := range t.Rel.Fields {
		if f.CaseSensitive && f.Name == key {
			return i, nil
		}
	}
	low := strings.ToLower(key)
	for i, f := range t.Rel.Fields {
		if !f.CaseSensitive && f.CanonicalName() == low {
			return i, nil
		}
	}
	for _, f := range t.Rel.Fields {
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

// State is a table's rows as a checkpoint keeps them.
type State struct {
	rows  map[string][]json.RawMessage
	count map[string]int
}

// Save is the table's state now.
func (t *Table) Save() State {
	st := State{rows: make(map[string][]json.RawMessage, len(t.rows)), count: make(map[string]int, len(t.count))}
	for k, v := range t.rows { // stored rows are never mutated in place
		st.rows[k] = v
	}
	for k, v := range t.count {
		st.count[k] = v
	}
	return st
}

// Restore makes st the table's state.
func (t *Table) Restore(st State) {
	t.rows, t.count = st.rows, st.count
}

// Len is how many rows the table holds.
func (t *Table) Len() int {
	if !t.Keyed() {
		n := 0
		for _, c := range t.count {
			n += c
		}
		return n
	}
	return len(t.rows)
}

// SumInt adds up an integer column over the table's rows (NULL counts 0);
// tableName is the table's name as the caller gave it, for the errors.
func (t *Table) SumInt(tableName, column string) (int64, error) {
	col := -1
	for i, f := range t.Rel.Fields {
		if f.CanonicalName() == feldera.TableIdent(column) {
			col = i
		}
	}
	if col < 0 {
		return 0, fmt.Errorf("felderatest: table %s has no column %s", tableName, column)
	}
	var sum int64
	for k, vals := range t.rows {
		raw := vals[col]
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("felderatest: %s.%s = %s is not an integer", tableName, column, raw)
		}
		if !t.Keyed() {
			n *= int64(t.count[k])
		}
		sum += n
	}
	return sum, nil
}

// KeyText is a row's key as InsertsByKey renders it: the key columns'
// JSON values joined by ",".
func (t *Table) KeyText(row []json.RawMessage) string { return keyText(row, t.pk) }

func keyText(row []json.RawMessage, idx []int) string {
	parts := make([]string, len(idx))
	for i, j := range idx {
		parts[i] = string(row[j])
	}
	return strings.Join(parts, ",")
}

// SameDefinition reports whether a table is unchanged by a program edit:
// what Feldera's persistent id of a table depends on.
func SameDefinition(a, b feldera.Relation) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
