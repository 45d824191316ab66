package decode

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Target is a mapped table: a Postgres table, its route (index into the
// outbox's per-table buffers) and the Feldera table it goes to.
type Target struct {
	Schema string // Postgres schema, canonical
	Name   string // Postgres table, canonical
	Route  int
	Dest   feldera.Relation
}

// Qualified is schema.name, for messages.
func (t *Target) Qualified() string { return t.Schema + "." + t.Name }

// Source is the quoted "schema"."name", for SQL.
func (t *Target) Source() string { return quoteIdent(t.Schema) + "." + quoteIdent(t.Name) }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// RefusalError is a change the connector must not deliver and cannot skip:
// an unmapped table, an unknown type, a TOAST hole, a missing key field, a
// value Feldera cannot represent. Retrying replays the same WAL into the
// same refusal, so it is fatal.
type RefusalError struct {
	Table  string // schema.table
	Column string
	OID    uint32
	Reason string
}

func (e *RefusalError) Error() string {
	var b strings.Builder
	b.WriteString("refused")
	if e.Table != "" {
		b.WriteString(": table ")
		b.WriteString(e.Table)
	}
	if e.Column != "" {
		b.WriteString(" column ")
		b.WriteString(e.Column)
	}
	if e.OID != 0 {
		fmt.Fprintf(&b, " (type OID %d)", e.OID)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Rel is the decoding plan of one relation: for each Postgres column, in
// the order pgoutput and COPY send them, the Feldera field it fills and
// its encoder.
type Rel struct {
	ID       uint32
	Target   *Target
	Identity byte // replica identity: 'd', 'n', 'f' or 'i'
	Cols     []ColPlan
	KeyCols  []int // indexes into Cols of Feldera's key fields, in key order
	// KeyGap names the Feldera key fields the replica identity does not
	// carry: a DELETE or key-changing UPDATE would lack them.
	KeyGap []string
}

// ColPlan is how one Postgres column is written.
type ColPlan struct {
	Name    string // Postgres column name
	TypeOID uint32
	Field   string // Feldera field name; "" when the column is dropped
	prefix  []byte // `"field":`
	enc     Encoder
	inKey   bool // in the replica identity
}

// Keyed reports whether the Feldera table has a PRIMARY KEY.
func (r *Rel) Keyed() bool { return len(r.Target.Dest.PrimaryKey) > 0 }

// NewRel plans a relation: it matches Postgres columns to Feldera fields
// by canonical identifier and picks an encoder per (Postgres type, Feldera
// type) pair. typeName names non-builtin OIDs for errors (may be nil).
// Warnings are returned for Postgres columns Feldera lacks and for a key
// the replica identity does not cover.
func NewRel(id uint32, t *Target, identity byte, cols []Column, typeName func(uint32) string) (*Rel, []string, error) {
	table := t.Qualified()
	r := &Rel{ID: id, Target: t, Identity: identity}
	var warnings []string
	used := map[string]bool{}
	for _, c := range cols {
		cp := ColPlan{Name: c.Name, TypeOID: c.TypeOID, inKey: c.Key || identity == 'f'}
		f, ok := t.Dest.Field(c.Name)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("table %s column %s has no field in Feldera table %s: it is not sent", table, c.Name, t.Dest.Name))
			r.Cols = append(r.Cols, cp)
			continue
		}
		if !Supported(c.TypeOID) {
			name := ""
			if typeName != nil {
				name = typeName(c.TypeOID)
			}
			if name == "" {
				name = "unknown"
			}
			return nil, nil, &RefusalError{Table: table, Column: c.Name, OID: c.TypeOID,
				Reason: fmt.Sprintf("type %s is not supported (user-defined types, enums, domains and composites are refused; cast it in a view or change the column type)", name)}
		}
		enc, err := EncoderFor(c.TypeOID, f.ColumnType)
		if err != nil {
			return nil, nil, &RefusalError{Table: table, Column: c.Name, OID: c.TypeOID,
				Reason: fmt.Sprintf("Postgres type %s has no faithful encoding into Feldera type %s of %s.%s", TypeName(c.TypeOID), describeType(f.ColumnType), t.Dest.Name, f.Name)}
		}
		cp.Field, cp.enc = f.CanonicalName(), enc
		cp.prefix = append(strconv.AppendQuote(nil, f.Name), ':')
		used[f.CanonicalName()] = true
		r.Cols = append(r.Cols, cp)
	}
	for _, f := range t.Dest.Fields {
		if !used[f.CanonicalName()] && !f.ColumnType.Nullable && f.Default == nil {
			return nil, nil, &RefusalError{Table: table, Column: f.Name,
				Reason: fmt.Sprintf("Feldera table %s has NOT NULL column %s with no default and no Postgres column", t.Dest.Name, f.Name)}
		}
	}
	for _, k := range t.Dest.PrimaryKey {
		idx := -1
		for i, c := range r.Cols {
			if c.Field == k {
				idx = i
			}
		}
		if idx < 0 {
			return nil, nil, &RefusalError{Table: table, Column: k,
				Reason: fmt.Sprintf("Feldera key field %s of %s has no Postgres column", k, t.Dest.Name)}
		}
		r.KeyCols = append(r.KeyCols, idx)
		if !r.Cols[idx].inKey {
			r.KeyGap = append(r.KeyGap, k)
		}
	}
	if len(r.KeyGap) > 0 {
		warnings = append(warnings, fmt.Sprintf("table %s: replica identity does not carry Feldera key field(s) %s: a DELETE or key-changing UPDATE will stop the connector (use REPLICA IDENTITY FULL or an identity index over them)",
			table, strings.Join(r.KeyGap, ", ")))
	}
	return r, warnings, nil
}

func describeType(ct feldera.ColumnType) string {
	if ct.Type == "ARRAY" && ct.Component != nil {
		return describeType(*ct.Component) + " ARRAY"
	}
	return ct.Type
}

// appendRow writes one NDJSON line {"<op>":{...}} from a tuple. keyOnly
// writes only the Feldera key fields (a delete on a keyed table). old, when
// non-nil, fills unchanged-TOAST holes.
func (r *Rel) appendRow(dst []byte, op string, tup, old []TupleCol, keyOnly bool) ([]byte, error) {
	if len(tup) != len(r.Cols) {
		return dst, &RefusalError{Table: r.Target.Qualified(),
			Reason: fmt.Sprintf("tuple has %d columns, relation has %d", len(tup), len(r.Cols))}
	}
	dst = append(dst, `{"`...)
	dst = append(dst, op...)
	dst = append(dst, `":{`...)
	first := true
	write := func(i int) error {
		cp := &r.Cols[i]
		if cp.enc == nil {
			return nil
		}
		col := tup[i]
		if col.Kind == ColUnchangedToast {
			if old == nil || len(old) != len(tup) || old[i].Kind == ColUnchangedToast {
				return &RefusalError{Table: r.Target.Qualified(), Column: cp.Name,
					Reason: "unchanged TOAST value without an old value to fill it (set REPLICA IDENTITY FULL on the table)"}
			}
			col = old[i]
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, cp.prefix...)
		switch col.Kind {
		case ColNull:
			dst = append(dst, "null"...)
		case ColText:
			var err error
			if dst, err = cp.enc(dst, col.Data); err != nil {
				return &RefusalError{Table: r.Target.Qualified(), Column: cp.Name, OID: cp.TypeOID, Reason: err.Error()}
			}
		default:
			return &RefusalError{Table: r.Target.Qualified(), Column: cp.Name, Reason: "binary tuple data (the binary option must be off)"}
		}
		return nil
	}
	if keyOnly {
		for _, i := range r.KeyCols {
			if err := write(i); err != nil {
				return dst, err
			}
		}
	} else {
		for i := range r.Cols {
			if err := write(i); err != nil {
				return dst, err
			}
		}
	}
	return append(dst, "}}\n"...), nil
}

// checkRetraction makes sure an old tuple carries what a retraction needs:
// every Feldera key field (keyed table) or the whole row (keyless table).
func (r *Rel) checkRetraction(kind byte, old []TupleCol) error {
	if len(old) != len(r.Cols) {
		return &RefusalError{Table: r.Target.Qualified(), Reason: fmt.Sprintf("old tuple has %d columns, relation has %d", len(old), len(r.Cols))}
	}
	if !r.Keyed() {
		if kind != 'O' {
			return &RefusalError{Table: r.Target.Qualified(), Reason: "a delete on a keyless Feldera table needs the whole old row (REPLICA IDENTITY FULL)"}
		}
		return nil
	}
	for _, i := range r.KeyCols {
		if kind == 'K' && !r.Cols[i].inKey || old[i].Kind == ColUnchangedToast {
			return &RefusalError{Table: r.Target.Qualified(), Column: r.Cols[i].Name,
				Reason: "the old tuple does not carry this Feldera key field: the retraction would match nothing in Feldera (fix the replica identity)"}
		}
	}
	return nil
}
