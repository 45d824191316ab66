package setup

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

func TestWALLevel_Check(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    WALLevel
		err  string // substring of the refusal; empty: accepted
		note string // substring of the note
		warn bool
	}{
		{name: "16 logical", w: WALLevel{Version: 160004, Setting: "logical"}},
		{name: "18 replica", w: WALLevel{Version: 180001, Setting: "replica"}, err: `wal_level is "replica": set wal_level = logical`},
		{name: "15 minimal", w: WALLevel{Version: 150010, Setting: "minimal"}, err: `wal_level is "minimal"`},
		{name: "19 logical", w: WALLevel{Version: 190000, Setting: "logical", Effective: "logical"}},
		{name: "19 replica, our slot first", w: WALLevel{Version: 190000, Setting: "replica", Effective: "replica"},
			note: "only logical slot", warn: true},
		{name: "19 replica, ours the only one", w: WALLevel{Version: 190001, Setting: "replica", Effective: "logical"},
			note: "effective_wal_level = logical); pgfeldera's slot is the only", warn: true},
		{name: "19 replica beside another slot", w: WALLevel{Version: 190001, Setting: "replica", Effective: "logical", OtherSlots: 1},
			note: "decodes logically while a logical slot exists"},
		{name: "19 minimal", w: WALLevel{Version: 190000, Setting: "minimal", Effective: "minimal"}, err: "set wal_level = replica"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			note, warn, err := tc.w.Check()
			if tc.err != "" {
				var fe *fatal.Error
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &fe) {
					t.Fatalf("Check() = %v, want a fatal error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check() = %v, want accepted", err)
			}
			if warn != tc.warn || !strings.Contains(note, tc.note) || (tc.note == "" && note != "") {
				t.Fatalf("Check() = %q, warn %v; want a note containing %q, warn %v", note, warn, tc.note, tc.warn)
			}
		})
	}
}
