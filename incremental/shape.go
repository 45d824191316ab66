package incremental

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/state"
)

// A table's shape: the Postgres columns that feed Feldera fields, with
// their types. Some changes of shape change rows without a WAL record per
// row, which logical decoding never sees:
//
//   - ADD COLUMN with a default: a constant default is stored once in the
//     catalog (atthasmissing) and read into every existing row; a volatile
//     one rewrites the table, and a rewrite is not decoded.
//   - ALTER COLUMN TYPE rewrites the table (USING may change every value).
//
// So a column that newly feeds Feldera, or feeds it with another type,
// means the rows Feldera holds may differ from Postgres in it, and the
// table is read again: a resnapshot request, taken at the RELATION that
// shows the new shape (every chunk reads rows of that shape or later),
// and a new session, whose plan reads the new columns (a chunk read with
// the old ones would set the new one to NULL in every row it upserts).
// state.Table.Columns records the shape the rows were read under, across
// restarts: a RELATION in a later session compares with it.

// ColumnsOf lists rel's columns that feed Feldera, as "name oid/typmod".
func ColumnsOf(rel *decode.Rel) []string {
	var cols []string
	for _, c := range rel.Cols {
		if c.Field != "" {
			cols = append(cols, fmt.Sprintf("%s %d/%d", c.Name, c.TypeOID, c.TypeMod))
		}
	}
	return cols
}

// reshaped lists the columns of now that known lacks: added, or of
// another type. A column known has and now lacks stopped feeding Feldera
// (the decoder refuses one that was renamed or dropped).
func reshaped(known, now []string) []string {
	var changed []string
	for _, c := range now {
		if !slices.Contains(known, c) {
			changed = append(changed, strings.SplitN(c, " ", 2)[0])
		}
	}
	return changed
}

// Shape compares a RELATION's shape with the one its table's rows were
// read under, records it, and asks for the table to be read again when a
// column newly feeds Feldera or changed type; received is the highest WAL
// position the stream read.
func (inc *Session) Shape(rel *decode.Rel, received pglogrepl.LSN) error {
	if rel == nil || inc.cfg.Hooks.Get().IgnoreShape {
		return nil // a table TABLES does not map: nothing was read under a known shape
	}
	st := inc.rec.St
	source := rel.Target.Qualified()
	i := slices.IndexFunc(st.Tables, func(t state.Table) bool { return t.Source == source })
	if i < 0 {
		return nil
	}
	now := ColumnsOf(rel)
	t := &st.Tables[i]
	if slices.Equal(t.Columns, now) {
		return nil
	}
	changed := reshaped(t.Columns, now)
	if t.Columns == nil || len(changed) == 0 {
		t.Columns = now // the first shape recorded, or a column no longer fed
		if err := state.Save(inc.cfg.StateFile, st); err != nil {
			return fatal.Wrap(err)
		}
		return nil
	}
	why := fmt.Sprintf("column %s of %s now feeds Feldera table %s, added or changed in type while streaming: an ADD COLUMN with a default or a rewrite (ALTER COLUMN TYPE) changes existing rows without a WAL record per row", strings.Join(changed, ", "), source, rel.Target.Dest.Name)
	// Refused here, before the new shape is saved: a restart meets the
	// same RELATION and refuses again, never streams on past it.
	switch {
	case inc.cfg.Never:
		return &decode.RefusalError{Table: source, Column: changed[0], Reason: why + "; SNAPSHOT_MODE=never reads no table again: remove the state file and the slot, and start with another SNAPSHOT_MODE"}
	case inc.keys[i].Err != nil:
		return &decode.RefusalError{Table: source, Column: changed[0], Reason: why + "; it cannot be read again while streaming (" + inc.keys[i].Err.Error() + "): remove the state file and the slot to read every table again"}
	}
	inc.cfg.Logger.Warn("stream: "+why+"; reading the table again while streaming", "table", source, "columns", strings.Join(changed, ","), "lsn", received)
	t.Columns = now
	if err := inc.request(Watermark{Resnapshot: "columns-" + received.String(), Tables: []string{source}}, received); err != nil {
		return err
	}
	// The session's plan reads the columns the catalog had when it began:
	// the next session plans from the catalog again, with the request
	// recorded, and reads the table with its new columns.
	return fmt.Errorf("the columns of %s changed: the session restarts to read it with them", source)
}
