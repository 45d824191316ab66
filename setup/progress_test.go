package setup

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// The progress table is used when the pipeline declares it with the
// shape pgfeldera writes (columns added to it nullable), refused with
// any other shape, and required only under "on".
func TestProgressTable(t *testing.T) {
	for _, c := range []struct {
		name, ddl, setting string
		use                bool
		refused            string // part of the refusal; "" for none
	}{
		{"the DDL pgfeldera ddl prints", ProgressDDL, ProgressAuto, true, ""},
		{"an added nullable column", `CREATE TABLE pgfeldera_progress (slot VARCHAR NOT NULL PRIMARY KEY, lsn BIGINT NOT NULL, note VARCHAR);`, ProgressOn, true, ""},
		{"none declared, auto", `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY);`, ProgressAuto, false, ""},
		{"none declared, on", `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY);`, ProgressOn, false, "declares no table pgfeldera_progress"},
		{"declared, off", ProgressDDL, ProgressOff, false, ""},
		{"lsn as INT", `CREATE TABLE pgfeldera_progress (slot VARCHAR NOT NULL PRIMARY KEY, lsn INT NOT NULL);`, ProgressAuto, false, "column lsn is INTEGER"},
		{"lsn nullable", `CREATE TABLE pgfeldera_progress (slot VARCHAR NOT NULL PRIMARY KEY, lsn BIGINT);`, ProgressAuto, false, "want BIGINT NOT NULL"},
		{"no key", `CREATE TABLE pgfeldera_progress (slot VARCHAR NOT NULL, lsn BIGINT NOT NULL);`, ProgressAuto, false, "primary key is ()"},
		{"an added NOT NULL column", `CREATE TABLE pgfeldera_progress (slot VARCHAR NOT NULL PRIMARY KEY, lsn BIGINT NOT NULL, at BIGINT NOT NULL);`, ProgressAuto, false, "column at is NOT NULL"},
		{"no lsn", `CREATE TABLE pgfeldera_progress (slot VARCHAR NOT NULL PRIMARY KEY, pos BIGINT);`, ProgressAuto, false, "no column lsn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			schema := feldera.ProgramSchema{Inputs: felderatest.MustParseDDL(c.ddl)}
			rel, err := progressTable(schema, c.setting)
			if (rel != nil) != c.use {
				t.Fatalf("table used: %v, want %v (err %v)", rel != nil, c.use, err)
			}
			if c.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !fatal.Is(err) || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), "FELDERA_PROGRESS_TABLE") {
				t.Fatalf("err %v: want a refusal naming FELDERA_PROGRESS_TABLE and %q", err, c.refused)
			}
		})
	}
}

// A row below the slot, or none, means loss only once the state file says
// the slot never passes the row; the message names both positions.
func TestProgressLost(t *testing.T) {
	for _, c := range []struct {
		name      string
		kept      bool
		row       pglogrepl.LSN
		found     bool
		confirmed pglogrepl.LSN
		want      []string // in the reason; none: not lost
	}{
		{"not kept: a missing row proves nothing", false, 0, false, 0x5000, nil},
		{"not kept: a row behind proves nothing", false, 0x1000, true, 0x5000, nil},
		{"kept, the row at the slot", true, 0x5000, true, 0x5000, nil},
		{"kept, the row ahead (the skip)", true, 0x6000, true, 0x5000, nil},
		{"kept, the row behind", true, 0x4FFF, true, 0x5000, []string{"0/4FFF", "0/5000", "slot s"}},
		{"kept, no row", true, 0, false, 0x5000, []string{"no row", "0/5000", "slot s"}},
		{"kept, a cleared row", true, 0, true, 0x5000, []string{"up to 0/0", "0/5000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ProgressLost(c.kept, "s", c.row, c.found, c.confirmed)
			if (got != "") != (c.want != nil) {
				t.Fatalf("ProgressLost = %q, want lost=%v", got, c.want != nil)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not name %q", got, w)
				}
			}
		})
	}
}
