package state_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/state"
)

// The marks are rewritten in place: a record that shrinks (a count over
// many tables cleared, a request answered) leaves nothing of the longer
// one behind, and the file reads back as the last record written, as a
// process that died right then would leave it.
func TestFenceFile_ShorterRecordInPlace(t *testing.T) {
	path := state.FencePath(filepath.Join(t.TempDir(), "state.json"))
	ff, err := state.OpenFence(path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	taken := map[string]uint64{}
	for i := range 80 { // past one 1 KiB unit: the file grows
		taken[fmt.Sprintf("table_with_a_long_name_%03d", i)] = uint64(i)
	}
	steps := []func() error{
		func() error { return ff.Past(&state.PastRow{Row: 0x5000, Taken: taken, Counted: "inc-1"}) },
		func() error { return ff.Outstanding("events", 3, time.Unix(100, 0)) },
		func() error {
			return ff.Past(&state.PastRow{Row: 0x6000, Taken: map[string]uint64{"events": 4}, Counted: "inc-1"})
		},
		func() error { return ff.Answered() },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
		f, err := state.LoadFence(path)
		if err != nil {
			t.Fatalf("after write %d: %v", i+1, err)
		}
		if !f.Running || f.Past == nil {
			t.Fatalf("after write %d: %+v", i+1, f)
		}
	}
	f, _ := state.LoadFence(path)
	if f.Outstanding != nil || f.Past.Row != 0x6000 || len(f.Past.Taken) != 1 || f.Past.Taken["events"] != 4 {
		t.Fatalf("the last record reads back as %+v, %+v", f.Outstanding, f.Past)
	}
}

// Close records the stop with the fence deadline, and keeps what the next
// process needs: the Feldera transaction left open and the count past the
// progress row.
func TestFenceFile_CloseKeepsTransactionAndPast(t *testing.T) {
	path := state.FencePath(filepath.Join(t.TempDir(), "state.json"))
	ff, err := state.OpenFence(path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	open := &state.OpenTransaction{ID: 7, Incarnation: "inc-1", Since: time.Unix(200, 0).UTC()}
	if err := ff.Transaction(open); err != nil {
		t.Fatal(err)
	}
	if err := ff.Past(&state.PastRow{Row: 0x5000, Taken: map[string]uint64{"events": 4}, Counted: "inc-1"}); err != nil {
		t.Fatal(err)
	}
	until := time.Unix(300, 0).UTC()
	if err := ff.Close(until); err != nil {
		t.Fatal(err)
	}
	f, err := state.LoadFence(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Running || !f.Until.Equal(until) || f.Transaction == nil || *f.Transaction != *open ||
		f.Past == nil || f.Past.Row != 0x5000 || f.Past.Taken["events"] != 4 {
		t.Fatalf("after Close: running %v, until %v, transaction %+v, past %+v", f.Running, f.Until, f.Transaction, f.Past)
	}
}
