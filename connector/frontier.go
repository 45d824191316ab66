package connector

import (
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Gate says when a batch Feldera completed may be acknowledged to Postgres:
// when it is durable in Feldera, which depends on the pipeline's
// fault-tolerance model (DURABILITY.md §2.3).
type Gate int

const (
	// GateComplete acknowledges at completion. Right without fault
	// tolerance (a Feldera restart loses everything anyway, and pgfeldera
	// resnapshots) and under exactly_once (Feldera journals each step
	// before it completes).
	GateComplete Gate = iota
	// GateCheckpoint acknowledges once a checkpoint covers the completing
	// step: under at_least_once a restart restores the last checkpoint and
	// loses what completed after it.
	GateCheckpoint
)

// GateFor is the gate for a fault-tolerance model (see chooseGate).
func GateFor(model feldera.FTModel, ackMode string) Gate {
	if model == feldera.FTAtLeastOnce && ackMode != AckAccepted {
		return GateCheckpoint
	}
	return GateComplete
}

func (g Gate) String() string {
	if g == GateCheckpoint {
		return "checkpoint"
	}
	return "complete"
}

// frontier is the acknowledgement rule, free of I/O: batches complete in
// source order, each with the LSN it may acknowledge (a COMMIT all of whose
// rows it carries; 0 when it ends inside a transaction) and the Feldera
// step that completed it. The durable LSN is the highest one whose batch,
// and every batch before it, is durable under the gate. It never moves
// back.
type frontier struct {
	gate    Gate
	durable pglogrepl.LSN
	pending []held // completed, not yet durable, in source order
	covered uint64 // the newest checkpoint's steps seen
}

type held struct {
	lsn  pglogrepl.LSN
	step uint64
	at   time.Time // when it completed
}

func newFrontier(g Gate, from pglogrepl.LSN) *frontier {
	return &frontier{gate: g, durable: from}
}

// completed records a batch completed in Feldera at step, which may
// acknowledge lsn (0: nothing new). It returns the durable LSN.
func (f *frontier) completed(lsn pglogrepl.LSN, step uint64, now time.Time) pglogrepl.LSN {
	if f.gate == GateComplete {
		if lsn > f.durable {
			f.durable = lsn
		}
		return f.durable
	}
	if n := len(f.pending); n > 0 && step < f.pending[n-1].step {
		step = f.pending[n-1].step // steps only grow in source order
	}
	f.pending = append(f.pending, held{lsn: lsn, step: step, at: now})
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

func (f *frontier) advance() pglogrepl.LSN {
	i := 0
	for ; i < len(f.pending) && f.pending[i].step <= f.covered; i++ {
		if f.pending[i].lsn > f.durable {
			f.durable = f.pending[i].lsn
		}
	}
	f.pending = f.pending[i:]
	return f.durable
}

// waiting reports whether completed batches wait for a checkpoint, and
// since when the oldest of them waits.
func (f *frontier) waiting() (time.Time, bool) {
	for _, h := range f.pending {
		if h.lsn > f.durable {
			return h.at, true
		}
	}
	return time.Time{}, false
}

// highestPending is the newest completed step that waits for a checkpoint.
func (f *frontier) highestPending() uint64 {
	if n := len(f.pending); n > 0 {
		return f.pending[n-1].step
	}
	return 0
}
