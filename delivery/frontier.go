package delivery

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// frontier is the acknowledgement rule, free of I/O. Batches enter in
// source order, each with the LSN it may acknowledge (a COMMIT all of whose
// rows it or an earlier batch carries; 0 when it ends inside a
// transaction). They complete in any order, each at the Feldera step that
// processed it. The durable LSN is the highest one whose batch, and every
// batch entered before it, is complete and (under the checkpoint gate)
// covered by a checkpoint. It never moves back; a failure drops everything
// after it, and the slot replays that.
//
// A batch becomes durable only after every batch before it did, so a
// smaller step reported for a later batch (none reported, or an older
// answer) cannot let a checkpoint cover it early: checkpoints only grow,
// and the earlier batch's step bounds it.
//
// With confirm (exactly_once), a completion counts only once a look at the
// pipeline that began after it found the process the session feeds: a
// program change restarts Feldera without its journal, and what the new
// process completes before its first checkpoint is lost by its next
// restart, so a completion in a process the session has not yet seen
// restart must not be acknowledged.
type frontier struct {
	gate      Gate
	confirm   bool
	durable   pglogrepl.LSN
	queue     []entry // entered and not yet durable, in source order
	base      uint64  // the id of queue[0]
	open      int     // entries not yet complete
	covered   uint64  // the newest checkpoint's steps seen
	confirmed time.Time
}

type entry struct {
	lsn     pglogrepl.LSN
	done    bool
	step    uint64
	entered time.Time // when it was sent
	at      time.Time // when it completed (the earliest, for merged entries)
	last    time.Time // when it completed (the latest, for merged entries)
}

func newFrontier(g Gate, from pglogrepl.LSN) *frontier {
	return &frontier{gate: g, durable: from}
}

// enter records a batch about to be sent, which may acknowledge lsn once
// it and every earlier batch are durable. It returns the batch's id.
func (f *frontier) enter(lsn pglogrepl.LSN, now time.Time) uint64 {
	f.queue = append(f.queue, entry{lsn: lsn, entered: now})
	f.open++
	return f.base + uint64(len(f.queue)-1)
}

// done records that batch id completed in Feldera at step. It returns the
// durable LSN. An id that is not open (unknown, or done already) changes
// nothing.
func (f *frontier) done(id, step uint64, now time.Time) pglogrepl.LSN {
	if id >= f.base && id-f.base < uint64(len(f.queue)) {
		if e := &f.queue[id-f.base]; !e.done {
			e.done, e.step, e.at, e.last = true, step, now, now
			f.open--
		}
	}
	return f.advance()
}

// reach records lsn, which needs nothing more from Feldera than the
// batches entered before it (its rows went out in them, or it had none),
// given that Feldera has completed up to step. It returns the durable LSN.
func (f *frontier) reach(lsn pglogrepl.LSN, step uint64, now time.Time) pglogrepl.LSN {
	if n := len(f.queue); n > 0 && f.queue[n-1].done && (f.gate == GateComplete || step <= f.queue[n-1].step) {
		// Right behind a complete entry and needing no later step: the
		// same wait, so merge (the queue stays as long as the batches in
		// flight and the steps awaiting a checkpoint, whatever the
		// number of commits).
		e := &f.queue[n-1]
		e.lsn = max(e.lsn, lsn)
		return f.advance()
	}
	// With the queue empty, lsn's rows went out in batches durable already.
	if len(f.queue) == 0 && (f.gate == GateComplete || step <= f.covered) {
		if lsn > f.durable {
			f.durable = lsn
		}
		return f.durable
	}
	f.queue = append(f.queue, entry{lsn: lsn, done: true, step: step, entered: now, at: now, last: now})
	return f.advance()
}

// confirmedAt records that a look at the pipeline begun at t found the
// session's process (see confirm). It returns the durable LSN.
func (f *frontier) confirmedAt(t time.Time) pglogrepl.LSN {
	if t.After(f.confirmed) {
		f.confirmed = t
	}
	return f.advance()
}

// checkpointed records that the newest checkpoint covers steps ≤ steps.
// It returns the durable LSN.
func (f *frontier) checkpointed(steps uint64) pglogrepl.LSN {
	if steps > f.covered {
		f.covered = steps
	}
	return f.advance()
}

// frontierMax bounds the queue. While checkpoints do not come (under the
// checkpoint gate) every batch that completes waits in it; past the bound,
// the complete entries at its head merge into one (compact).
const frontierMax = 1024

// compact merges the complete entries at the head of the queue into one,
// which keeps the id of the last (base moves past the others, so every
// later id still finds its entry), its LSN and the highest step, and the
// earliest times: it becomes durable once a checkpoint covers its highest
// step, when the last of them would have, and no later.
func (f *frontier) compact() {
	if len(f.queue) <= frontierMax {
		return
	}
	k := 0
	for k < len(f.queue) && f.queue[k].done {
		k++
	}
	if k < 2 {
		return
	}
	m := f.queue[k-1]
	for _, e := range f.queue[:k-1] {
		m.lsn, m.step = max(m.lsn, e.lsn), max(m.step, e.step)
		if e.entered.Before(m.entered) {
			m.entered = e.entered
		}
		if e.at.Before(m.at) {
			m.at = e.at
		}
		if e.last.After(m.last) {
			m.last = e.last
		}
	}
	f.queue[k-1] = m
	f.queue = append(f.queue[:0], f.queue[k-1:]...)
	f.base += uint64(k - 1)
}

func (f *frontier) advance() pglogrepl.LSN {
	defer f.compact()
	i := 0
	for ; i < len(f.queue); i++ {
		e := f.queue[i]
		if !e.done {
			break
		}
		if f.gate == GateCheckpoint && e.step > f.covered {
			break
		}
		if f.confirm && !e.last.Before(f.confirmed) {
			break
		}
		if e.lsn > f.durable {
			f.durable = e.lsn
		}
	}
	if i > 0 {
		f.queue = append(f.queue[:0], f.queue[i:]...)
		f.base += uint64(i)
	}
	return f.durable
}

// inFlight is the number of batches entered and not yet complete.
func (f *frontier) inFlight() int { return f.open }

// pending reports whether anything entered or reached is not yet durable.
func (f *frontier) pending() bool { return len(f.queue) > 0 }

// oldestOpen is when the oldest batch still incomplete was sent.
func (f *frontier) oldestOpen() (time.Time, bool) {
	for _, e := range f.queue {
		if !e.done {
			return e.entered, true
		}
	}
	return time.Time{}, false
}

// waiting reports whether completed batches wait for nothing but a
// checkpoint, and since when the oldest of them waits.
func (f *frontier) waiting() (time.Time, bool) {
	for _, e := range f.queue {
		if !e.done {
			break
		}
		if e.lsn > f.durable {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// waitingWAL is how much WAL the complete batches waiting for a
// checkpoint hold beyond the durable LSN: what a checkpoint now would let
// the slot release.
func (f *frontier) waitingWAL() uint64 {
	var top pglogrepl.LSN
	for _, e := range f.queue {
		if !e.done {
			break
		}
		top = max(top, e.lsn)
	}
	if top <= f.durable {
		return 0
	}
	return uint64(top - f.durable)
}

// completed is the highest LSN of the complete prefix: what Feldera's views
// show, durable or not.
func (f *frontier) completed() pglogrepl.LSN {
	top := f.durable
	for _, e := range f.queue {
		if !e.done {
			break
		}
		top = max(top, e.lsn)
	}
	return top
}

// highestPending is the step a checkpoint must cover for every completed
// batch of the complete prefix to be durable.
func (f *frontier) highestPending() uint64 {
	var step uint64
	for _, e := range f.queue {
		if !e.done {
			break
		}
		step = max(step, e.step)
	}
	return step
}
