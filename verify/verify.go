// Package verify compares one table's rows in Postgres with the same table
// in Feldera, at rest: a row count and an order-independent digest of the
// rows, each row reduced to a canonical form per Feldera column type so that
// what pgfeldera sends ("2024-01-02 03:04:05", "12.50") and what Feldera's
// /query prints back ("2024-01-02T03:04:05", 12.5) compare equal.
//
// Memory does not grow with the table: a first pass keeps a count and a
// digest sum per side and per key bucket. When the sums differ, a second pass
// over the same rows keeps only the rows of a few differing buckets, so the
// differing keys can be named.
package verify

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/pgfeldera/pgfeldera/feldera"
)

const (
	nBuckets = 4096
	// maxSuspect is how many differing buckets the second pass collects.
	maxSuspect = 8
	// maxCollected bounds the rows kept per side in the second pass.
	maxCollected = 200_000
)

// Difference is one key (or, for a table without a key, one row) whose
// rows differ.
type Difference struct {
	Key string `json:"key"`
	// Kind is "missing in Feldera", "not in Postgres" or "values differ";
	// for a keyless table the first two carry a count of copies.
	Kind string `json:"kind"`
	// Columns names the fields whose values differ ("values differ").
	Columns []string `json:"columns,omitempty"`
}

// Result is the comparison of one table.
type Result struct {
	Dest          string       `json:"feldera_table"`
	PostgresRows  int64        `json:"postgres_rows"`
	FelderaRows   int64        `json:"feldera_rows"`
	PostgresHash  string       `json:"postgres_hash"`
	FelderaHash   string       `json:"feldera_hash"`
	Match         bool         `json:"match"`
	NotCompared   []string     `json:"not_compared,omitempty"` // Feldera columns no Postgres column feeds
	Differences   []Difference `json:"differences,omitempty"`
	MoreDifferent bool         `json:"more_differences,omitempty"`
}

type sum [2]uint64

func (s *sum) add(d [16]byte) {
	s[0] += binary.BigEndian.Uint64(d[:8])
	s[1] += binary.BigEndian.Uint64(d[8:])
}

func (s sum) String() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], s[0])
	binary.BigEndian.PutUint64(b[8:], s[1])
	return hex.EncodeToString(b[:])
}

type entry struct {
	count  int64
	digest [16]byte
	values []string // canonical values, for naming differing columns
}

type side struct {
	rows     int64
	total    sum
	bRows    [nBuckets]int64
	bSum     [nBuckets]sum
	kept     map[string]*entry
	overflow bool
}

// Table compares one Feldera table with its Postgres source. Feed every row
// of both sides with AddPostgres and AddFeldera, in any order; if Match
// reports false, call StartDiff, feed every row of both sides again, and
// read Differences. A Table is not safe for concurrent use.
type Table struct {
	rel      feldera.Relation
	exact    map[string]int // case-sensitive field names
	folded   map[string]int // case-insensitive field names, lower case
	keyIdx   []int          // key fields; every field when the table has no key
	keyed    bool
	compared []bool // fields in the digest; see Only
	pg, fel  side
	suspect  map[int]bool // buckets collected in the second pass
	values   []string
	seen     []bool
	rowBuf   []byte
	keyBuf   []byte
	fieldRaw []json.RawMessage
}

// New prepares the comparison of the Feldera table rel.
func New(rel feldera.Relation) (*Table, error) {
	t := &Table{rel: rel, exact: map[string]int{}, folded: map[string]int{}}
	for i, f := range rel.Fields {
		if f.CaseSensitive {
			t.exact[f.Name] = i
		} else {
			t.folded[strings.ToLower(f.Name)] = i
		}
	}
	for _, k := range rel.PrimaryKey {
		i, ok := t.field(k)
		if !ok {
			return nil, fmt.Errorf("feldera table %s: primary key column %s is not a field", rel.Name, k)
		}
		t.keyIdx = append(t.keyIdx, i)
	}
	t.keyed = len(t.keyIdx) > 0
	if !t.keyed {
		for i := range rel.Fields {
			t.keyIdx = append(t.keyIdx, i)
		}
	}
	n := len(rel.Fields)
	t.values, t.seen, t.fieldRaw = make([]string, n), make([]bool, n), make([]json.RawMessage, n)
	t.compared = make([]bool, n)
	for i := range t.compared {
		t.compared[i] = true
	}
	return t, nil
}

// Only restricts the comparison to the named fields (and the key): a
// Feldera column no Postgres column feeds holds its default, not a copy,
// and must not count as a difference. Call it before adding rows.
func (t *Table) Only(fields []string) {
	for i := range t.compared {
		t.compared[i] = false
	}
	for _, name := range fields {
		if i, ok := t.field(name); ok {
			t.compared[i] = true
		}
	}
	if t.keyed {
		for _, i := range t.keyIdx {
			t.compared[i] = true
		}
		return
	}
	t.keyIdx = t.keyIdx[:0]
	for i, c := range t.compared {
		if c {
			t.keyIdx = append(t.keyIdx, i)
		}
	}
}

// NotCompared names the fields Only left out.
func (t *Table) NotCompared() []string {
	var out []string
	for i, c := range t.compared {
		if !c {
			out = append(out, t.rel.Fields[i].Name)
		}
	}
	return out
}

func (t *Table) field(name string) (int, bool) {
	if i, ok := t.exact[name]; ok {
		return i, true
	}
	i, ok := t.folded[strings.ToLower(name)]
	return i, ok
}

// AddPostgres adds one Postgres row as pgfeldera encodes it for ingress:
// an NDJSON line {"insert":{...}}.
func (t *Table) AddPostgres(line []byte) error {
	var env struct {
		Insert json.RawMessage `json:"insert"`
	}
	if err := json.Unmarshal(line, &env); err != nil || len(env.Insert) == 0 {
		return fmt.Errorf("postgres row for %s: not an insert line: %.200s", t.rel.Name, line)
	}
	return t.add(&t.pg, env.Insert, "postgres")
}

// AddFeldera adds one row of Feldera's /query JSON output: an object keyed
// by column name, each value as /query prints it (feldera.IngressValue).
func (t *Table) AddFeldera(row []byte) error {
	return t.add(&t.fel, row, "feldera")
}

func (t *Table) add(s *side, obj []byte, from string) error {
	if err := t.canonicalRow(s, obj, from); err != nil {
		return err
	}
	t.keyBuf = t.keyBuf[:0]
	for _, i := range t.keyIdx {
		t.keyBuf = appendValue(t.keyBuf, t.values[i])
	}
	var d [16]byte
	full := sha256.Sum256(t.rowBuf)
	copy(d[:], full[:16])
	kh := sha256.Sum256(t.keyBuf)
	b := int(binary.BigEndian.Uint16(kh[:2])) % nBuckets

	if t.suspect == nil {
		s.rows++
		s.total.add(d)
		s.bRows[b]++
		s.bSum[b].add(d)
		return nil
	}
	if !t.suspect[b] {
		return nil
	}
	if e, ok := s.kept[string(t.keyBuf)]; ok {
		e.count++
		return nil
	}
	if len(s.kept) >= maxCollected {
		s.overflow = true
		return nil
	}
	s.kept[string(t.keyBuf)] = &entry{count: 1, digest: d, values: append([]string(nil), t.values...)}
	return nil
}

// canonicalRow puts each compared field of the row obj in its canonical
// form into t.values and their encoding into t.rowBuf, so both sides'
// rows hash alike; a column the Feldera table lacks is an error.
func (t *Table) canonicalRow(s *side, obj []byte, from string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return fmt.Errorf("%s row of %s: %w", from, t.rel.Name, err)
	}
	for i := range t.seen {
		t.seen[i] = false
	}
	for name, raw := range m {
		i, ok := t.field(name)
		if !ok {
			return fmt.Errorf("%s row of %s has column %q, which the Feldera table does not have", from, t.rel.Name, name)
		}
		t.seen[i], t.fieldRaw[i] = true, raw
	}
	t.rowBuf = t.rowBuf[:0]
	for i, f := range t.rel.Fields {
		if !t.compared[i] {
			t.values[i] = ""
			continue
		}
		t.values[i] = Null
		if t.seen[i] {
			raw := t.fieldRaw[i]
			if s == &t.fel {
				var err error
				if raw, err = feldera.IngressValue(f.ColumnType, raw); err != nil {
					return fmt.Errorf("%s row of %s column %s: %w", from, t.rel.Name, f.Name, err)
				}
			}
			v, err := Canonical(f.ColumnType, raw)
			if err != nil {
				return fmt.Errorf("%s row of %s column %s: %w", from, t.rel.Name, f.Name, err)
			}
			t.values[i] = v
		}
		t.rowBuf = appendValue(t.rowBuf, t.values[i])
	}
	return nil
}

// appendValue writes a length-prefixed value, so that no two rows share an
// encoding.
func appendValue(dst []byte, v string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// Match reports whether the first pass found equal counts and digests.
func (t *Table) Match() bool {
	return t.pg.rows == t.fel.rows && t.pg.total == t.fel.total
}

// Result reports the first pass, and the differences when StartDiff and a
// second pass have run.
func (t *Table) Result(maxDiffs int) Result {
	r := Result{Dest: t.rel.Name, PostgresRows: t.pg.rows, FelderaRows: t.fel.rows,
		PostgresHash: t.pg.total.String(), FelderaHash: t.fel.total.String(), Match: t.Match(), NotCompared: t.NotCompared()}
	if t.suspect != nil {
		r.Differences, r.MoreDifferent = t.differences(maxDiffs)
	}
	return r
}

// StartDiff prepares the second pass: it keeps the rows of up to
// maxSuspect buckets whose counts or sums differ.
func (t *Table) StartDiff() {
	t.suspect = map[int]bool{}
	for b := 0; b < nBuckets && len(t.suspect) < maxSuspect; b++ {
		if t.pg.bRows[b] != t.fel.bRows[b] || t.pg.bSum[b] != t.fel.bSum[b] {
			t.suspect[b] = true
		}
	}
	t.pg.kept, t.fel.kept = map[string]*entry{}, map[string]*entry{}
}

func (t *Table) differences(max int) ([]Difference, bool) {
	keys := map[string]bool{}
	for k := range t.pg.kept {
		keys[k] = true
	}
	for k := range t.fel.kept {
		keys[k] = true
	}
	var diffs []Difference
	for k := range keys {
		p, f := t.pg.kept[k], t.fel.kept[k]
		switch {
		case p != nil && f != nil && p.digest == f.digest && p.count == f.count:
			continue
		case p != nil && f != nil && p.digest == f.digest:
			// Same row, different multiplicity: only a keyless table.
			d := Difference{Key: t.describe(p.values), Kind: "missing in Feldera"}
			if f.count > p.count {
				d.Kind = "not in Postgres"
			}
			d.Kind = fmt.Sprintf("%s (Postgres has %d, Feldera %d)", d.Kind, p.count, f.count)
			diffs = append(diffs, d)
		case p != nil && f != nil:
			d := Difference{Key: t.describe(p.values), Kind: "values differ"}
			for i, fld := range t.rel.Fields {
				if p.values[i] != f.values[i] {
					d.Columns = append(d.Columns, fld.Name)
				}
			}
			diffs = append(diffs, d)
		case p != nil:
			diffs = append(diffs, Difference{Key: t.describe(p.values), Kind: "missing in Feldera"})
		default:
			diffs = append(diffs, Difference{Key: t.describe(f.values), Kind: "not in Postgres"})
		}
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].Key < diffs[j].Key })
	more := t.pg.overflow || t.fel.overflow
	if len(diffs) > max {
		diffs, more = diffs[:max], true
	}
	return diffs, more
}

// describe renders a row's key as name=value pairs.
func (t *Table) describe(values []string) string {
	parts := make([]string, 0, len(t.keyIdx))
	for _, i := range t.keyIdx {
		parts = append(parts, t.rel.Fields[i].Name+"="+values[i])
	}
	return strings.Join(parts, " ")
}
