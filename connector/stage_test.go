package connector

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// The stage clock times each transaction once per stage, from its commit
// time, when the stage's position first reaches its end LSN; a later stage
// implies the earlier ones; acknowledged transactions leave.
func TestStageClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step struct {
		commit pglogrepl.LSN // >0: a transaction ends here, committed at second `sec`
		stage  Stage
		lsn    pglogrepl.LSN
		sec    int
		want   string // what is observed: "stage:seconds" …
	}
	for _, c := range []struct {
		name  string
		steps []step
		left  int // transactions still held at the end
	}{
		{"each stage in turn", []step{
			{commit: 100, sec: 0},
			{commit: 200, sec: 1},
			{stage: StageSent, lsn: 200, sec: 2, want: "sent:2 sent:1"},
			{stage: StageComplete, lsn: 100, sec: 5, want: "complete:5"},
			{stage: StageComplete, lsn: 200, sec: 6, want: "complete:5"},
			{stage: StageDurable, lsn: 200, sec: 9, want: "durable:9 durable:8"},
			{stage: StageAcked, lsn: 200, sec: 10, want: "acked:10 acked:9"},
		}, 0},
		{"a later stage implies the earlier ones", []step{
			{commit: 100, sec: 0},
			{stage: StageAcked, lsn: 100, sec: 3, want: "sent:3 complete:3 durable:3 acked:3"},
		}, 0},
		{"a position that does not move times nothing", []step{
			{commit: 100, sec: 0},
			{stage: StageSent, lsn: 100, sec: 1, want: "sent:1"},
			{stage: StageSent, lsn: 100, sec: 2},
			{stage: StageSent, lsn: 50, sec: 3},
		}, 1},
		{"a transaction past the position waits", []step{
			{commit: 100, sec: 0},
			{commit: 300, sec: 1},
			{stage: StageAcked, lsn: 200, sec: 4, want: "sent:4 complete:4 durable:4 acked:4"},
			{stage: StageDurable, lsn: 300, sec: 5, want: "sent:4 complete:4 durable:4"},
		}, 1},
		{"a commit not after the last is ignored", []step{
			{commit: 100, sec: 0},
			{commit: 100, sec: 1},
			{commit: 90, sec: 1},
			{stage: StageSent, lsn: 100, sec: 2, want: "sent:2"},
		}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var clock StageClock
			for i, s := range c.steps {
				if s.commit > 0 {
					clock.Commit(s.commit, at(s.sec))
					continue
				}
				var got []string
				clock.Reach(s.stage, s.lsn, at(s.sec), func(st Stage, d time.Duration) {
					got = append(got, fmt.Sprintf("%s:%g", st, d.Seconds()))
				})
				if g := strings.Join(got, " "); g != s.want {
					t.Errorf("step %d (%s to %d at %ds): observed %q, want %q", i, s.stage, s.lsn, s.sec, g, s.want)
				}
			}
			if len(clock.txns) != c.left {
				t.Errorf("%d transactions held, want %d", len(clock.txns), c.left)
			}
		})
	}
}

// Past clockMax a transaction merges into the last one, which keeps
// the earlier commit time: the times are never understated, and the queue
// stays bounded.
func TestStageClock_Bounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock StageClock
	for i := 1; i <= clockMax+10; i++ {
		clock.Commit(pglogrepl.LSN(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if len(clock.txns) != clockMax {
		t.Fatalf("%d transactions held, want %d", len(clock.txns), clockMax)
	}
	last := clock.txns[clockMax-1]
	if last.end != clockMax+10 || !last.commit.Equal(t0.Add(clockMax*time.Millisecond)) {
		t.Fatalf("last = %+v", last)
	}
	n := 0
	clock.Reach(StageAcked, clockMax+10, t0.Add(time.Minute), func(st Stage, d time.Duration) {
		if st == StageAcked {
			n++
		}
	})
	if n != clockMax || len(clock.txns) != 0 {
		t.Fatalf("acked %d, held %d", n, len(clock.txns))
	}
}
