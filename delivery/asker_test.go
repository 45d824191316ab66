package delivery

import (
	"errors"
	"testing"
	"time"
)

// When to ask for a checkpoint, by time and by WAL: a request by WAL is
// not repeated while the last one is being served, only once a newer
// checkpoint was seen for two looks, or CheckpointAfter passed (a request
// lost or failed).
func TestAsker_Due(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const after = 30 * time.Second
	const budget = 1 << 20
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		now     time.Duration
		seen    string // a look found this newest checkpoint ("": none)
		waiting time.Duration
		wal     int64
		ask     bool // whether it is due
		fail    bool // the request, if made, fails
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"nothing waits", []step{{now: 0, waiting: -1, wal: 2 * budget}}},
		{"by time", []step{{now: 10 * time.Second, waiting: 0, wal: 10}, {now: 30 * time.Second, waiting: 0, wal: 10, ask: true}, {now: 45 * time.Second, waiting: 0, wal: 10}}},
		{"by WAL, at once", []step{{now: 0, waiting: 0, wal: budget, ask: true}}},
		{"by WAL, not again while served", []step{
			{now: 0, seen: "a", waiting: 0, wal: budget, ask: true},
			{now: 500 * time.Millisecond, seen: "a", waiting: 0, wal: 2 * budget},
			{now: 3 * time.Second, seen: "a", waiting: 0, wal: 3 * budget},
			{now: 3500 * time.Millisecond, seen: "b", waiting: 0, wal: 3 * budget}, // new, but the figure may be stale
			{now: 4 * time.Second, seen: "b", waiting: 0, wal: 3 * budget},
			{now: 4500 * time.Millisecond, seen: "b", waiting: 0, wal: 3 * budget, ask: true},
		}},
		{"by WAL, again after CheckpointAfter when never served", []step{
			{now: 0, waiting: 0, wal: budget, ask: true},
			{now: 29 * time.Second, waiting: 0, wal: budget},
			{now: 31 * time.Second, waiting: 0, wal: budget, ask: true},
		}},
		{"by WAL, after a failed request waits CheckpointAfter", []step{
			{now: 0, seen: "a", waiting: 0, wal: budget, ask: true, fail: true},
			{now: 5 * time.Second, seen: "b", waiting: 0, wal: budget},
			{now: 31 * time.Second, seen: "b", waiting: 0, wal: budget, ask: true},
		}},
		{"under the budget: time only", []step{{now: 0, waiting: 0, wal: budget - 1}, {now: 30 * time.Second, waiting: 0, wal: budget - 1, ask: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var a asker
			for i, s := range c.steps {
				now := at(s.now)
				if s.seen != "" {
					a.seen(s.seen, now)
				}
				var waiting time.Time
				if s.waiting >= 0 {
					waiting = at(s.waiting)
				}
				why := a.due(now, waiting, s.wal, budget, after)
				if (why != "") != s.ask {
					t.Fatalf("step %d (at %s): due %q, want ask=%v", i, s.now, why, s.ask)
				}
				if why != "" {
					var err error
					if s.fail {
						err = errTest
					}
					a.asking(now, uint64(i+1), err)
				}
			}
		})
	}
}

var errTest = errors.New("test")
