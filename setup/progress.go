package setup

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// The progress table (FELDERA_PROGRESS_TABLE): a table of the Feldera
// pipeline where pgfeldera keeps, per slot, the end LSN of the last whole
// source transaction Feldera holds, written in the same Feldera
// transaction as the rows. A session reads it first and skips what
// Feldera holds (delivery/progress.go). The user declares it; `pgfeldera
// ddl` prints it.
const (
	ProgressTable = "pgfeldera_progress"
	// ProgressDDL declares it. Columns added to it must be nullable: the
	// connector writes only these two.
	ProgressDDL = "CREATE TABLE pgfeldera_progress (\n  slot VARCHAR NOT NULL PRIMARY KEY,\n  lsn BIGINT NOT NULL\n) WITH ('materialized' = 'true');\n"
)

// FELDERA_PROGRESS_TABLE values: auto uses the table when the pipeline
// declares it, on requires it, off ignores it.
const (
	ProgressAuto = "auto"
	ProgressOn   = "on"
	ProgressOff  = "off"
)

// ProgressSays is what a user gets of replays under setting, with the
// progress table used or not (used: the pipeline declares it, in the
// right shape): `pgfeldera check` prints it.
func ProgressSays(setting string, used bool) string {
	switch {
	case used:
		return "exactly once: the pipeline declares " + ProgressTable + ", so every flush commits this source's position with its rows, and a restart sends nothing Feldera holds again"
	case setting == ProgressOff:
		return "at least once: FELDERA_PROGRESS_TABLE=off, so a restart may send again rows Feldera holds (primary keys absorb them; a keyless table is refused)"
	}
	return "at least once: the pipeline declares no " + ProgressTable + ", so a restart may send again rows Feldera holds; declare it (`pgfeldera ddl` prints it) and replays become exact"
}

// progressTable is the pipeline's progress table under setting, nil when
// none is used; an error refuses a table declared with another shape, or
// none under "on".
func progressTable(schema feldera.ProgramSchema, setting string) (*feldera.Relation, error) {
	if setting == ProgressOff {
		return nil, nil
	}
	rel, ok := schema.Input(ProgressTable)
	if !ok {
		if setting == ProgressOn {
			return nil, Refuse("FELDERA_PROGRESS_TABLE", "FELDERA_PROGRESS_TABLE=on, but the pipeline declares no table "+ProgressTable,
				"add to the pipeline's program: "+strings.ReplaceAll(strings.TrimSpace(ProgressDDL), "\n", " "))
		}
		return nil, nil
	}
	if why := progressShape(rel); why != "" {
		return nil, Refuse("FELDERA_PROGRESS_TABLE", "Feldera table "+ProgressTable+" cannot hold pgfeldera's progress: "+why,
			"declare it as "+strings.ReplaceAll(strings.TrimSpace(ProgressDDL), "\n", " ")+" (columns added to it must be nullable), or set FELDERA_PROGRESS_TABLE=off")
	}
	return &rel, nil
}

// progressShape says what keeps rel from being the progress table: it
// needs slot VARCHAR, its only key, and lsn BIGINT NOT NULL; any other
// column must take NULL, since pgfeldera writes only those two.
func progressShape(rel feldera.Relation) string {
	found := map[string]bool{}
	for _, f := range rel.Fields {
		name := f.CanonicalName()
		switch {
		case name == "slot" && f.ColumnType.Type != "VARCHAR":
			return fmt.Sprintf("column slot is %s, want VARCHAR", f.ColumnType.Type)
		case name == "lsn" && (f.ColumnType.Type != "BIGINT" || f.ColumnType.Nullable):
			return fmt.Sprintf("column lsn is %s, want BIGINT NOT NULL", f.ColumnType.Type)
		case name != "slot" && name != "lsn" && !f.ColumnType.Nullable && f.Default == nil:
			return fmt.Sprintf("column %s is NOT NULL without a default, and pgfeldera writes only slot and lsn", name)
		}
		found[name] = true
	}
	for _, want := range []string{"slot", "lsn"} {
		if !found[want] {
			return "it has no column " + want
		}
	}
	if !slices.Equal(rel.PrimaryKey, []string{"slot"}) {
		return fmt.Sprintf("its primary key is (%s), want (slot): one row per slot, upserted", strings.Join(rel.PrimaryKey, ", "))
	}
	return ""
}

// ProgressLost says why Feldera lost data the slot acknowledged, judged by
// the progress row ("" when nothing says so): with kept (the state file's
// ProgressKept) the slot never passes the row Feldera holds, so a missing
// row, or one below the slot's confirmed position, is a Feldera that went
// back (storage lost, an older checkpoint restored). Without kept the
// row proves nothing: sessions without the table moved the slot alone.
func ProgressLost(kept bool, slot string, row pglogrepl.LSN, found bool, confirmed pglogrepl.LSN) string {
	switch {
	case !kept:
		return ""
	case !found:
		return fmt.Sprintf("Feldera's %s has no row for slot %s, which the slot's confirmed position %s needs: Feldera lost acknowledged data", ProgressTable, slot, confirmed)
	case row < confirmed:
		return fmt.Sprintf("Feldera's %s holds slot %s up to %s, below the slot's confirmed position %s: Feldera lost acknowledged data", ProgressTable, slot, row, confirmed)
	}
	return ""
}
