package decode

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Target is a mapped table: a Postgres table, its route (index into the
// outbox's per-table buffers) and the Feldera table it goes to.
type Target struct {
	Schema string // Postgres schema, canonical
	Name   string // Postgres table, canonical
	Route  int
	Dest   feldera.Relation

	// Filter is the publication's row filter for this table (SQL, as
	// pg_publication_tables.rowfilter prints it), "" when there is none:
	// the stream carries only the rows it holds, so every read of the
	// source (snapshot, resnapshot, verify) must apply it too.
	Filter string
	// Query is set when the table cannot be read by COPY table (cols): a
	// partitioned table, a row filter, or a published generated column.
	Query bool
}

// Qualified is schema.name, for messages.
func (t *Target) Qualified() string { return t.Schema + "." + t.Name }

// Source is the quoted "schema"."name", for SQL.
func (t *Target) Source() string {
	return pgvalue.QuoteIdent(t.Schema) + "." + pgvalue.QuoteIdent(t.Name)
}

// RefusalError is a change the connector must not deliver and cannot skip:
// an unmapped table, an unknown type, a TOAST hole, a missing key field, a
// value Feldera cannot represent. Retrying replays the same WAL into the
// same refusal, so it is fatal.
type RefusalError struct {
	Table  string // schema.table
	Column string
	OID    uint32
	Key    string // the row's Feldera key, "id=5", when a value is refused
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
	if e.Key != "" {
		b.WriteString(" row ")
		b.WriteString(e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Fatal says a refused value or schema ends the process (fatal.Is).
func (e *RefusalError) Fatal() bool { return true }

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
	opts   *Options
}

// Options are what planning a relation needs beyond its columns.
type Options struct {
	// Types looks up types the built-in table does not know (enums,
	// domains, citext, ranges); nil knows only the built-ins.
	Types pgvalue.Types
	// NullUnrepresentable delivers a value Feldera cannot hold (infinity,
	// BC, year > 9999) as NULL into a nullable column instead of refusing
	// it: UNREPRESENTABLE_VALUES=null.
	NullUnrepresentable bool
	// OnNull is told of each value delivered as NULL that was not NULL in
	// Postgres (may be nil).
	OnNull func(table, column string, err error)
}

// ColPlan is how one Postgres column is written.
type ColPlan struct {
	Name    string // Postgres column name
	TypeOID uint32
	TypeMod int32
	Field   string // Feldera field name; "" when the column is dropped
	prefix  []byte // `"field":`
	enc     pgvalue.Encoder
	inKey   bool // in the replica identity
	null    bool // the Feldera field is nullable
}

// Keyed reports whether the Feldera table has a PRIMARY KEY.
func (r *Rel) Keyed() bool { return len(r.Target.Dest.PrimaryKey) > 0 }

// NewRel plans a relation: it matches Postgres columns to Feldera fields
// by canonical identifier and picks an encoder per (Postgres type, typmod,
// Feldera type). prev, when non-nil, is the plan this relation had earlier
// in the stream: a Feldera field it filled that no column fills now (a
// rename or drop mid-stream) is refused, since every upsert would then set
// it to NULL. Warnings are returned for Postgres columns Feldera lacks,
// Feldera fields no column fills, and a key the replica identity does not
// cover.
func NewRel(id uint32, t *Target, identity byte, cols []Column, opts *Options, prev *Rel) (*Rel, []string, error) {
	if opts == nil {
		opts = &Options{}
	}
	r := &Rel{ID: id, Target: t, Identity: identity, opts: opts}
	used := map[string]bool{}
	warnings, err := r.planCols(cols, used)
	if err != nil {
		return nil, nil, err
	}
	more, err := r.checkFields(prev, used)
	if err != nil {
		return nil, nil, err
	}
	warnings = append(warnings, more...)
	if err := r.planKey(); err != nil {
		return nil, nil, err
	}
	return r, warnings, nil
}

// planCols plans each Postgres column into r.Cols: the Feldera field it
// fills (marked in used) and its encoder. A column Feldera lacks is not
// sent, with a warning; a type pair with no encoding is refused.
func (r *Rel) planCols(cols []Column, used map[string]bool) ([]string, error) {
	t, table, identity, opts := r.Target, r.Target.Qualified(), r.Identity, r.opts
	var warnings []string
	for _, c := range cols {
		cp := ColPlan{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, inKey: c.Key || identity == 'f'}
		f, ok := t.Dest.Field(c.Name)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("table %s column %s has no field in Feldera table %s: it is not sent", table, c.Name, t.Dest.Name))
			r.Cols = append(r.Cols, cp)
			continue
		}
		enc, err := pgvalue.Plan(c.TypeOID, c.TypeMod, f.ColumnType, opts.Types)
		if err != nil {
			reason := err.Error()
			var te *pgvalue.TypeError
			if errors.As(err, &te) {
				reason = fmt.Sprintf("%s (Feldera column %s.%s is %s)", te.Reason, t.Dest.Name, f.Name, pgvalue.DescribeType(f.ColumnType))
			}
			return nil, &RefusalError{Table: table, Column: c.Name, OID: c.TypeOID, Reason: reason}
		}
		cp.Field, cp.enc, cp.null = f.CanonicalName(), enc, f.ColumnType.Nullable
		cp.prefix = append(strconv.AppendQuote(nil, f.Name), ':')
		used[f.CanonicalName()] = true
		r.Cols = append(r.Cols, cp)
	}
	return warnings, nil
}

// checkFields looks at the Feldera fields no column fills (used marks the
// filled ones): one that prev filled, or a NOT NULL one without a default,
// is refused; a nullable one is warned about on a relation's first plan.
func (r *Rel) checkFields(prev *Rel, used map[string]bool) ([]string, error) {
	t, table := r.Target, r.Target.Qualified()
	var warnings []string
	if prev != nil {
		for _, pc := range prev.Cols {
			if pc.Field != "" && !used[pc.Field] {
				return nil, &RefusalError{Table: table, Column: pc.Name,
					Reason: fmt.Sprintf("the column that filled Feldera field %s.%s is gone from the relation mid-stream (renamed or dropped): every later row would set %s to NULL in Feldera; rename or drop the Feldera column to match (a program change restarts the pipeline), then restart pgfeldera",
						t.Dest.Name, pc.Field, pc.Field)}
			}
		}
	}
	for _, f := range t.Dest.Fields {
		if !used[f.CanonicalName()] && f.ColumnType.Nullable && prev == nil {
			warnings = append(warnings, fmt.Sprintf("Feldera table %s column %s has no Postgres column in %s: every row is sent without it (NULL, or its default)", t.Dest.Name, f.Name, table))
		}
	}
	for _, f := range t.Dest.Fields {
		if !used[f.CanonicalName()] && !f.ColumnType.Nullable && f.Default == nil {
			return nil, &RefusalError{Table: table, Column: f.Name,
				Reason: fmt.Sprintf("Feldera table %s has NOT NULL column %s with no default and no Postgres column", t.Dest.Name, f.Name)}
		}
	}
	return warnings, nil
}

// planKey finds the columns of Feldera's key fields (r.KeyCols, r.KeyGap)
// and refuses a key the replica identity does not carry, and a keyless
// table whose replica identity is not FULL.
func (r *Rel) planKey() error {
	t, table, identity := r.Target, r.Target.Qualified(), r.Identity
	for _, k := range t.Dest.PrimaryKey {
		idx := -1
		for i, c := range r.Cols {
			if c.Field == k {
				idx = i
			}
		}
		if idx < 0 {
			return &RefusalError{Table: table, Column: k,
				Reason: fmt.Sprintf("Feldera key field %s of %s has no Postgres column", k, t.Dest.Name)}
		}
		r.KeyCols = append(r.KeyCols, idx)
		if !r.Cols[idx].inKey {
			r.KeyGap = append(r.KeyGap, k)
		}
	}
	if len(r.KeyGap) > 0 {
		// An UPDATE that changes a key column outside the identity sends
		// no old row: the new row would be inserted and the old one stay
		// in Feldera for good; a DELETE would carry no value to retract
		// it by.
		var ident []string
		for _, c := range r.Cols {
			if c.inKey {
				ident = append(ident, c.Name)
			}
		}
		return &RefusalError{Table: table, Column: r.KeyGap[0],
			Reason: fmt.Sprintf("Feldera table %s has key %s, but the replica identity of %s (%s) does not carry %s: an UPDATE that changes it would leave the old row in Feldera, and a DELETE could not be retracted (ALTER TABLE %s REPLICA IDENTITY FULL, or give Feldera the Postgres key)",
				t.Dest.Name, strings.Join(t.Dest.PrimaryKey, ", "), table, identityName(identity, ident), strings.Join(r.KeyGap, ", "), table)}
	}
	if !r.Keyed() && identity != 'f' {
		return &RefusalError{Table: table,
			Reason: fmt.Sprintf("Feldera table %s has no PRIMARY KEY, so an UPDATE or DELETE must retract the old row by its whole value, which only REPLICA IDENTITY FULL sends, but %s has REPLICA IDENTITY %s (ALTER TABLE %s REPLICA IDENTITY FULL)",
				t.Dest.Name, table, identityName(identity, nil), table)}
	}
	return nil
}

// identityName says what a replica identity is, for refusals.
func identityName(identity byte, cols []string) string {
	name := map[byte]string{'d': "DEFAULT", 'n': "NOTHING", 'f': "FULL", 'i': "USING INDEX"}[identity]
	if name == "" {
		name = string(identity)
	}
	if len(cols) > 0 {
		name += ": " + strings.Join(cols, ", ")
	}
	return name
}

// keyOf names a row by its Feldera key, "id=5,region=eu", for refusals;
// values are clipped.
func (r *Rel) keyOf(tup []TupleCol) string {
	var b strings.Builder
	for n, i := range r.KeyCols {
		if i >= len(tup) {
			return ""
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.Cols[i].Name)
		b.WriteByte('=')
		switch tup[i].Kind {
		case ColText:
			b.WriteString(clip(tup[i].Data))
		case ColNull:
			b.WriteString("NULL")
		default:
			b.WriteString("?")
		}
	}
	return b.String()
}

// clip shortens a value for a message.
func clip(s []byte) string {
	if len(s) > 64 {
		return string(s[:64]) + "…"
	}
	return string(s)
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
			mark := len(dst)
			var err error
			if dst, err = cp.enc(dst, col.Data); err != nil {
				if dst, err = r.valueError(dst, mark, cp, tup, err); err != nil {
					return err
				}
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

// valueError handles the error err of cp's encoder, which appended to dst
// past mark, for a value of the tuple tup: a value Feldera cannot hold
// goes as null into a nullable column when NaN, or when
// UNREPRESENTABLE_VALUES=null says so; otherwise it is refused, naming
// tup's key. It is apart from appendRow so that a value that encodes
// costs no call.
func (r *Rel) valueError(dst []byte, mark int, cp *ColPlan, tup []TupleCol, err error) ([]byte, error) {
	var u *pgvalue.Unrepresentable
	if errors.As(err, &u) && cp.null && (u.NaN || r.opts.NullUnrepresentable) {
		dst = append(dst[:mark], "null"...)
		if r.opts.OnNull != nil {
			r.opts.OnNull(r.Target.Qualified(), cp.Name, err)
		}
		return dst, nil
	}
	reason := err.Error()
	if u != nil && !u.NaN {
		reason += " (UNREPRESENTABLE_VALUES=null delivers it as NULL into a nullable column)"
	} else if u != nil {
		reason += " (Feldera column " + cp.Field + " is NOT NULL)"
	}
	return dst, &RefusalError{Table: r.Target.Qualified(), Column: cp.Name, OID: cp.TypeOID, Key: r.keyOf(tup), Reason: reason}
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

// KeyText is a row's Feldera key in the one text form the stream and COPY
// share (each key column's Postgres text output, the session's pinned
// settings making it canonical, joined by NUL, which no text value holds),
// for reconciling an incremental snapshot's chunk with the stream. ok is
// false when a key column is NULL, missing or an unchanged TOAST value:
// the key is then unknown, and a caller must assume the worst.
func (r *Rel) KeyText(tup []TupleCol) (key string, ok bool) {
	b, ok := r.AppendKeyText(nil, tup)
	return string(b), ok
}

// AppendKeyText appends KeyText's form of the key to dst.
func (r *Rel) AppendKeyText(dst []byte, tup []TupleCol) ([]byte, bool) {
	for _, i := range r.KeyCols {
		if i >= len(tup) || tup[i].Kind != ColText {
			return dst, false
		}
	}
	for j, i := range r.KeyCols {
		if j > 0 {
			dst = append(dst, 0)
		}
		dst = append(dst, tup[i].Data...)
	}
	return dst, len(r.KeyCols) > 0
}
