package setup

import (
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// What a fault-tolerant Feldera may have restored, against the checkpoint
// C (steps 40, 700 records) recorded as holding everything acknowledged,
// which was listed after A and B. Feldera drops checkpoints oldest first.
func TestRestoredEnough(t *testing.T) {
	cp := func(uuid string, steps, records uint64) feldera.Checkpoint {
		return feldera.Checkpoint{UUID: uuid, Steps: steps, ProcessedRecords: records}
	}
	a, b, c := cp("A", 10, 100), cp("B", 30, 500), cp("C", 40, 700)
	rec := &state.CheckpointRef{UUID: "C", Steps: 40, ProcessedRecords: 700, Before: []string{"A", "B"}}
	for _, tc := range []struct {
		name string
		cps  []feldera.Checkpoint
		ok   bool
		why  string
	}{
		{"as left", []feldera.Checkpoint{a, b, c}, true, ""},
		{"newer ones since", []feldera.Checkpoint{b, c, cp("D", 50, 900)}, true, ""},
		{"C rolled out behind newer ones", []feldera.Checkpoint{cp("D", 50, 900), cp("E", 60, 950)}, true, ""},
		{"C rolled out, no records since", []feldera.Checkpoint{cp("D", 41, 700)}, true, ""},
		{"empty store", nil, false, "lists no checkpoint"},
		{"back to B", []feldera.Checkpoint{a, b}, false, "taken before checkpoint C"},
		{"back to B, then more input and a checkpoint", []feldera.Checkpoint{a, b, cp("X", 45, 800)}, false, "it lists A, taken before"},
		{"empty store, then more input and checkpoints", []feldera.Checkpoint{cp("X", 12, 710), cp("Y", 50, 900)}, false, "its oldest checkpoint, X"},
		{"back to one before the records", []feldera.Checkpoint{cp("Z", 5, 50)}, false, "its oldest checkpoint, Z"},
	} {
		ok, why := RestoredEnough(rec, tc.cps)
		if ok != tc.ok || !strings.Contains(why, tc.why) {
			t.Errorf("%s: ok=%v why=%q, want ok=%v and %q", tc.name, ok, why, tc.ok, tc.why)
		}
	}
	if ok, _ := RestoredEnough(nil, nil); !ok {
		t.Error("nothing recorded: anything restored is enough")
	}
}

// The newest checkpoint of a list is recorded with the ones before it
// (the newest refBefore of them).
func TestRef(t *testing.T) {
	var cps []feldera.Checkpoint
	for i := 0; i < 20; i++ {
		cps = append(cps, feldera.Checkpoint{UUID: string(rune('a' + i)), Steps: uint64(i)})
	}
	r := CheckpointRef(cps)
	if r.UUID != "t" || len(r.Before) != refBefore || r.Before[0] != "d" || r.Before[refBefore-1] != "s" {
		t.Fatalf("ref = %+v", r)
	}
	if r := CheckpointRef(cps[:1]); r.UUID != "a" || len(r.Before) != 0 {
		t.Fatalf("ref of one = %+v", r)
	}
}
