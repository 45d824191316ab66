package delivery

import (
	"math/rand"
	"os"
	"strconv"
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

// Batches in flight: entered in source order, completed in any order.
func TestFrontier_InFlight(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t.Run("out-of-order completions ack the contiguous prefix", func(t *testing.T) {
		f := newFrontier(GateComplete, 5)
		a, b, c := f.enter(10, t0), f.enter(20, t0), f.enter(30, t0)
		if f.inFlight() != 3 {
			t.Fatalf("in flight %d", f.inFlight())
		}
		if got := f.done(c, 3, t0); got != 5 {
			t.Fatalf("the last completing first acked %s", got)
		}
		if got := f.done(a, 1, t0); got != 10 {
			t.Fatalf("after the first: %s", got)
		}
		if got := f.done(b, 2, t0); got != 30 {
			t.Fatalf("after the middle one: %s", got)
		}
		if f.inFlight() != 0 || f.pending() {
			t.Fatalf("in flight %d pending %v", f.inFlight(), f.pending())
		}
	})
	t.Run("a batch inside a transaction acks nothing and holds back the rest", func(t *testing.T) {
		f := newFrontier(GateComplete, 5)
		a, b := f.enter(0, t0), f.enter(20, t0)
		if got := f.done(b, 2, t0); got != 5 {
			t.Fatalf("acked %s past an incomplete batch", got)
		}
		if got := f.done(a, 1, t0); got != 20 {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("a commit reached behind a batch in flight waits for it", func(t *testing.T) {
		f := newFrontier(GateComplete, 5)
		a := f.enter(10, t0)
		if got := f.reach(15, 0, t0); got != 5 {
			t.Fatalf("reached %s past a batch in flight", got)
		}
		f.reach(16, 0, t0) // merges with the one before
		if len(f.queue) != 2 {
			t.Fatalf("queue %d entries, want 2 (commits behind a batch merge)", len(f.queue))
		}
		if got := f.done(a, 1, t0); got != 16 {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("unknown and repeated ids change nothing", func(t *testing.T) {
		f := newFrontier(GateComplete, 5)
		a, b := f.enter(10, t0), f.enter(20, t0)
		f.done(a, 1, t0)
		if got := f.done(a, 1, t0); got != 10 || f.inFlight() != 1 {
			t.Fatalf("repeat: %s in flight %d", got, f.inFlight())
		}
		if got := f.done(b+7, 1, t0); got != 10 || f.inFlight() != 1 {
			t.Fatalf("unknown: %s in flight %d", got, f.inFlight())
		}
	})
	t.Run("oldest open is the oldest incomplete batch's send", func(t *testing.T) {
		f := newFrontier(GateComplete, 0)
		a := f.enter(10, t0)
		f.enter(20, t0.Add(time.Second))
		if at, ok := f.oldestOpen(); !ok || !at.Equal(t0) {
			t.Fatalf("%v %v", at, ok)
		}
		f.done(a, 1, t0)
		if at, ok := f.oldestOpen(); !ok || !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("%v %v", at, ok)
		}
	})
	t.Run("checkpoint gate: a later batch's small step does not get it covered early", func(t *testing.T) {
		f := newFrontier(GateCheckpoint, 5)
		a, b := f.enter(10, t0), f.enter(20, t0)
		f.done(b, 2, t0) // e.g. no step, or an older answer
		f.done(a, 7, t0)
		if got := f.checkpointed(6); got != 5 {
			t.Fatalf("a checkpoint at 6 made %s durable; the first batch completed at 7", got)
		}
		if at, ok := f.waiting(); !ok || !at.Equal(t0) {
			t.Fatalf("waiting %v %v", at, ok)
		}
		if f.highestPending() != 7 {
			t.Fatalf("highest pending %d", f.highestPending())
		}
		if got := f.checkpointed(7); got != 20 {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("checkpoint gate: completed behind an incomplete batch is not waiting for a checkpoint", func(t *testing.T) {
		f := newFrontier(GateCheckpoint, 5)
		a, b := f.enter(10, t0), f.enter(20, t0)
		f.done(b, 3, t0)
		if _, ok := f.waiting(); ok {
			t.Fatal("waiting for a checkpoint while an earlier batch is incomplete")
		}
		f.done(a, 2, t0)
		if f.highestPending() != 3 {
			t.Fatalf("highest pending %d", f.highestPending())
		}
	})
}

// The property: over random schedules (batches some of which end inside
// a transaction, commits reached between them, completions in any order,
// steps reported late or larger than true, checkpoints, failures and
// restarts), the durable LSN never passes a batch that is not complete
// and (checkpoint gate) covered, never moves back, and reaches the last
// commit once everything is complete and covered.
func TestFrontier_RandomSchedules(t *testing.T) {
	seed := time.Now().UnixNano()
	if v := os.Getenv("FRONTIER_SEED"); v != "" { // reproduces a failure
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("FRONTIER_SEED=%q: %v", v, err)
		}
	}
	t.Logf("FRONTIER_SEED=%d", seed)
	rng := rand.New(rand.NewSource(seed))
	t0 := time.Unix(1000, 0)
	for iter := 0; iter < 3000; iter++ {
		gate := Gate(rng.Intn(2))
		type spec struct {
			lsn      pglogrepl.LSN
			reached  bool   // a commit with nothing buffered: reach, not enter
			trueStep uint64 // the step that really processed it (0 for a reach)
			done     bool
			id       uint64
		}
		var specs []*spec
		lsn, step := pglogrepl.LSN(100), uint64(0)
		for n := 1 + rng.Intn(12); len(specs) < n; {
			s := &spec{}
			if rng.Intn(4) != 0 {
				lsn += pglogrepl.LSN(1 + rng.Intn(5))
				s.lsn = lsn
			}
			if s.lsn != 0 && rng.Intn(4) == 0 {
				s.reached = true
			} else {
				step += uint64(rng.Intn(3)) // Feldera may fold several batches into one step
				s.trueStep = step
			}
			specs = append(specs, s)
		}
		lastLSN := lsn
		from := pglogrepl.LSN(100)
		f := newFrontier(gate, from)
		var covered, reportedMax uint64
		durable := from
		// safe is the highest LSN the oracle allows: that of the longest
		// prefix of complete (and covered) batches.
		safe := func() pglogrepl.LSN {
			best := from
			for _, s := range specs {
				if !s.done || gate == GateCheckpoint && s.trueStep > covered {
					break
				}
				best = max(best, s.lsn)
			}
			return best
		}
		check := func(what string, got pglogrepl.LSN) {
			t.Helper()
			if got < durable {
				t.Fatalf("iter %d %s: durable moved back %s → %s", iter, what, durable, got)
			}
			if got > safe() {
				t.Fatalf("iter %d gate %s %s: durable %s passes an incomplete or uncovered batch (safe %s)", iter, gate, what, got, safe())
			}
			durable = got
		}
		next := 0 // the next spec to send
		var open []*spec
		send := func() { // the next one: a commit reached, or a batch sent
			s := specs[next]
			next++
			if s.reached {
				s.done = true
				check("reach", f.reach(s.lsn, reportedMax, t0))
			} else {
				s.id = f.enter(s.lsn, t0)
				open = append(open, s)
			}
		}
		for steps := 0; steps < 200; steps++ {
			switch r := rng.Intn(10); {
			case r < 4 && next < len(specs):
				send()
			case r < 7 && len(open) > 0: // one in flight completes
				i := rng.Intn(len(open))
				s := open[i]
				open = append(open[:i], open[i+1:]...)
				s.done = true
				rep := s.trueStep
				switch rng.Intn(4) {
				case 0:
					rep = step // a newer token's answer covered it
				case 1:
					if gate == GateComplete {
						rep = 0 // no step reported
					}
				}
				reportedMax = max(reportedMax, rep)
				check("done", f.done(s.id, rep, t0))
			case r < 9: // a checkpoint
				covered = max(covered, uint64(rng.Intn(int(step)+2)))
				check("checkpoint", f.checkpointed(covered))
			default: // a failure: the session ends, the next replays from the slot
				cut := 0
				for i, s := range specs {
					if s.lsn != 0 && s.lsn <= durable {
						cut = i + 1
					}
				}
				for _, s := range specs[cut:] {
					s.done = false
				}
				specs, from = specs[cut:], durable
				f, open, next = newFrontier(gate, durable), nil, 0
				reportedMax = 0
			}
		}
		// Finish: send the rest, complete everything, cover every step.
		for next < len(specs) {
			send()
		}
		rng.Shuffle(len(open), func(i, j int) { open[i], open[j] = open[j], open[i] })
		for _, s := range open {
			s.done = true
			check("done", f.done(s.id, s.trueStep, t0))
		}
		covered = step
		check("final checkpoint", f.checkpointed(step))
		if durable != lastLSN {
			t.Fatalf("iter %d gate %s: everything complete and covered, durable %s, want %s", iter, gate, durable, lastLSN)
		}
		if f.inFlight() != 0 || f.pending() {
			t.Fatalf("iter %d: in flight %d pending %v at the end", iter, f.inFlight(), f.pending())
		}
	}
}

// While no checkpoint comes, every completed batch waits in the queue;
// past frontierMax the complete head merges into one entry. The queue
// stays bounded, a batch still in flight behind it keeps its id, the
// oldest wait is kept (the stalled gate counts from it), and a checkpoint
// makes durable exactly what it covers: nothing before the merged steps
// are all covered, everything once they are.
func TestFrontier_BoundedWhileCheckpointsWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFrontier(GateCheckpoint, 0)
	var last uint64
	for i := 1; i <= 5000; i++ {
		id := f.enter(pglogrepl.LSN(i*10), t0.Add(time.Duration(i)*time.Millisecond))
		f.done(id, uint64(i), t0.Add(time.Duration(i)*time.Millisecond))
		last = id
		if len(f.queue) > frontierMax+1 {
			t.Fatalf("after %d batches the queue holds %d entries, more than %d", i, len(f.queue), frontierMax+1)
		}
	}
	open := f.enter(60000, t0.Add(time.Hour))
	if open != last+1 {
		t.Fatalf("the next batch got id %d, want %d", open, last+1)
	}
	if at, ok := f.waiting(); !ok || !at.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("waiting since %v %v, want the first batch's completion", at, ok)
	}
	if got := f.checkpointed(4999); got != 49990 {
		t.Fatalf("a checkpoint covering all but the last completed step made %s durable, want 0/C346", got)
	}
	if got := f.checkpointed(5000); got != 50000 {
		t.Fatalf("a checkpoint covering every completed step made %s durable, want 0/C350", got)
	}
	if got := f.done(open, 5001, t0.Add(2*time.Hour)); got != 50000 {
		t.Fatalf("the batch in flight, done at an uncovered step, made %s durable", got)
	}
	if got := f.checkpointed(5001); got != 60000 {
		t.Fatalf("after its checkpoint: %s, want 0/EA60", got)
	}
}

// Under exactly_once a completion counts once a look at the pipeline that
// began after it found the session's process: one that began before (it
// may have answered before a program change restarted Feldera) does not.
func TestFrontier_ConfirmedAfterCompletion(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFrontier(GateComplete, 5)
	f.confirm = true
	a := f.enter(10, t0)
	b := f.enter(20, t0)
	if got := f.done(a, 1, t0.Add(time.Second)); got != 5 {
		t.Fatalf("durable %s before any confirmation, want 0/5", got)
	}
	if got := f.confirmedAt(t0.Add(500 * time.Millisecond)); got != 5 {
		t.Fatalf("durable %s after a look begun before the completion, want 0/5", got)
	}
	f.done(b, 2, t0.Add(3*time.Second))
	if got := f.confirmedAt(t0.Add(2 * time.Second)); got != 10 {
		t.Fatalf("durable %s after a look between the completions, want 0/A", got)
	}
	if got := f.reach(25, 2, t0.Add(4*time.Second)); got != 10 {
		t.Fatalf("durable %s: a commit behind an unconfirmed batch went ahead", got)
	}
	if got := f.confirmedAt(t0.Add(5 * time.Second)); got != 25 {
		t.Fatalf("durable %s after a look past every completion, want 0/19", got)
	}
	if got := f.confirmedAt(t0); got != 25 {
		t.Fatalf("an older look moved the position: %s", got)
	}
}

// The WAL waiting for a checkpoint is that of the complete prefix beyond
// the durable LSN: a batch still in flight, and what follows it, do not
// count (a checkpoint now would not release them).
func TestFrontier_WaitingWAL(t *testing.T) {
	now := time.Now()
	f := newFrontier(GateCheckpoint, 1000)
	a := f.enter(1500, now)
	b := f.enter(2500, now)
	c := f.enter(4000, now)
	if w := f.waitingWAL(); w != 0 {
		t.Fatalf("nothing complete: %d bytes waiting", w)
	}
	f.done(a, 1, now)
	f.done(c, 3, now)
	if w := f.waitingWAL(); w != 500 {
		t.Fatalf("first batch complete: %d bytes waiting, want 500 (the third is behind an incomplete one)", w)
	}
	f.done(b, 2, now)
	if w := f.waitingWAL(); w != 3000 {
		t.Fatalf("all complete: %d bytes waiting, want 3000", w)
	}
	f.checkpointed(2)
	if w := f.waitingWAL(); w != 1500 {
		t.Fatalf("a checkpoint covers two: %d bytes waiting, want 1500", w)
	}
	f.checkpointed(3)
	if w := f.waitingWAL(); w != 0 {
		t.Fatalf("all durable: %d bytes waiting", w)
	}
}

// The merged head keeps the highest step of what it merged, not the last
// entry's: a completion's step need not grow with the batches (the
// bounded test above only uses growing ones), and a checkpoint that
// misses the highest must make none of the merged batches durable.
func TestFrontier_CompactKeepsTheHighestStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFrontier(GateCheckpoint, 0)
	const n = 3000
	for i := 1; i <= n; i++ {
		id := f.enter(pglogrepl.LSN(i*10), t0)
		f.done(id, uint64(n-i+1), t0) // the first batch completes at the highest step
	}
	if len(f.queue) > frontierMax+1 {
		t.Fatalf("the queue holds %d entries", len(f.queue))
	}
	if got := f.checkpointed(n - 1); got != 0 {
		t.Fatalf("a checkpoint that misses the first batch's step %d made %s durable, want nothing", n, got)
	}
	if got := f.checkpointed(n); got != n*10 {
		t.Fatalf("a checkpoint covering every step made %s durable, want %s", got, pglogrepl.LSN(n*10))
	}
}

// A batch completed twice (a completion reported again) counts once: the
// batches in flight do not drop below those still open, and the second
// report's step does not replace the first's, so a later checkpoint's
// cover is judged by the step that processed the batch.
func TestFrontier_RepeatedCompletionCountsOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFrontier(GateCheckpoint, 10)
	a := f.enter(20, t0)
	b := f.enter(30, t0)
	f.done(a, 7, t0)
	f.done(a, 3, t0) // again, with an earlier step
	if n := f.inFlight(); n != 1 {
		t.Fatalf("in flight after a repeated completion: %d, want 1 (batch %d still open)", n, b)
	}
	if got := f.checkpointed(5); got != 10 {
		t.Fatalf("a checkpoint of 5 steps acknowledged %s: the repeated report's step replaced the batch's 7", got)
	}
	if got := f.checkpointed(7); got != 20 {
		t.Fatalf("a checkpoint of 7 steps acknowledged %s, want 0/14", got)
	}
}
