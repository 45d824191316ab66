package delivery

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pglogrepl"
)

// rowsSink answers the progress table's query with rows.
type rowsSink struct {
	fakeSink
	rows []string
}

func (f *rowsSink) Query(_ context.Context, _ string, fn func(json.RawMessage) error) error {
	for _, r := range f.rows {
		if err := fn(json.RawMessage(r)); err != nil {
			return err
		}
	}
	return nil
}

// The progress row is keyed by its source: a row of another server or
// database with the same slot name is never read as this source's; a
// row keyed by the slot name alone (written before rows were keyed) is
// taken over only while the source has none; and the row is written
// under the source's key.
func TestProgress_RowKeyedBySource(t *testing.T) {
	const me, other = `"7001/app/pgfeldera"`, `"7002/app/pgfeldera"`
	for _, c := range []struct {
		name  string
		rows  []string
		lsn   pglogrepl.LSN
		found bool
	}{
		{"none", nil, 0, false},
		{"another source's only", []string{`{"slot":` + other + `,"lsn":900}`}, 0, false},
		{"another database's only", []string{`{"slot":"7001/db2/pgfeldera","lsn":900}`}, 0, false},
		{"ours among others", []string{`{"slot":` + other + `,"lsn":900}`, `{"slot":` + me + `,"lsn":100}`}, 100, true},
		{"the slot's alone, taken over", []string{`{"slot":"pgfeldera","lsn":50}`}, 50, true},
		{"ours over the slot's alone", []string{`{"slot":"pgfeldera","lsn":50}`, `{"slot":` + me + `,"lsn":100}`}, 100, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSender(&rowsSink{rows: c.rows}, false, &counters{})
			s.Progress = &Progress{Table: "pgfeldera_progress", Slot: "pgfeldera"}
			s.Progress.Keyed("7001", "app")
			lsn, found, err := s.ReadProgress(context.Background())
			if err != nil || lsn != c.lsn || found != c.found {
				t.Fatalf("ReadProgress = %s, %v, %v; want %s, %v", lsn, found, err, c.lsn, c.found)
			}
		})
	}
	p := &Progress{Table: "pgfeldera_progress", Slot: "pgfeldera"}
	p.Keyed("7001", "app")
	if got, want := string(p.line(0x10)), `{"insert":{"slot":"7001/app/pgfeldera","lsn":16}}`+"\n"; got != want {
		t.Fatalf("line = %q, want %q", got, want)
	}
}
