package connector

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// The acknowledgement rule, case by case, without a Postgres.
func TestFrontier(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type op struct {
		complete  bool
		lsn       pglogrepl.LSN
		step      uint64 // completed: the step; else the checkpoint's steps
		want      pglogrepl.LSN
		wantWaits bool
	}
	cases := []struct {
		name string
		gate Gate
		from pglogrepl.LSN
		ops  []op
	}{
		{"complete gate acks at completion", GateComplete, 10, []op{
			{true, 20, 5, 20, false}, {true, 0, 6, 20, false}, {true, 30, 7, 30, false},
		}},
		{"complete gate never moves back", GateComplete, 50, []op{
			{true, 20, 5, 50, false},
		}},
		{"checkpoint gate holds until a checkpoint covers the step", GateCheckpoint, 10, []op{
			{true, 20, 5, 10, true},
			{false, 0, 4, 10, true}, // a checkpoint before the step: not covered
			{false, 0, 5, 20, false},
		}},
		{"a checkpoint covers a prefix only", GateCheckpoint, 10, []op{
			{true, 20, 5, 10, true}, {true, 30, 8, 10, true}, {true, 40, 9, 10, true},
			{false, 0, 8, 30, true},
			{false, 0, 100, 40, false},
		}},
		{"a batch inside a transaction acks nothing, and holds back what follows", GateCheckpoint, 10, []op{
			{true, 0, 5, 10, false}, {true, 25, 6, 10, true},
			{false, 0, 5, 10, true},
			{false, 0, 6, 25, false},
		}},
		{"a step that goes back is treated as the step before it (order wins)", GateCheckpoint, 10, []op{
			{true, 20, 9, 10, true}, {true, 30, 3, 10, true}, // e.g. no step reported
			{false, 0, 3, 10, true},
			{false, 0, 9, 30, false},
		}},
		{"an older checkpoint seen later does not uncover anything", GateCheckpoint, 10, []op{
			{true, 20, 5, 10, true},
			{false, 0, 7, 20, false},
			{true, 30, 6, 30, false}, // covered by the checkpoint at 7 already seen
			{false, 0, 2, 30, false},
		}},
		{"a completion below the durable LSN does not move it back", GateCheckpoint, 50, []op{
			{true, 20, 5, 50, false}, {false, 0, 5, 50, false},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFrontier(c.gate, c.from)
			for i, o := range c.ops {
				var got pglogrepl.LSN
				if o.complete {
					got = f.reach(o.lsn, o.step, t0.Add(time.Duration(i)*time.Second))
				} else {
					got = f.checkpointed(o.step)
				}
				_, waits := f.waiting()
				if got != o.want || waits != o.wantWaits {
					t.Fatalf("op %d %+v: durable %s waiting %v, want %s %v", i, o, got, waits, o.want, o.wantWaits)
				}
			}
		})
	}
}

func TestFrontier_WaitingSinceOldest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFrontier(GateCheckpoint, 0)
	f.reach(10, 1, t0)
	f.reach(20, 2, t0.Add(time.Second))
	if at, ok := f.waiting(); !ok || !at.Equal(t0) {
		t.Fatalf("waiting since %v %v, want %v", at, ok, t0)
	}
	f.checkpointed(1)
	if at, ok := f.waiting(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("after the first is covered: waiting since %v %v", at, ok)
	}
	if f.highestPending() != 2 {
		t.Fatalf("highest pending step %d", f.highestPending())
	}
}
