package connector

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Stage is a step on a source transaction's way from its COMMIT in
// Postgres to the slot's acknowledgement.
type Stage int

const (
	// StageSent: every row of it was taken by Feldera's ingress (HTTP 200).
	StageSent Stage = iota
	// StageComplete: Feldera completed it, and every transaction before
	// it: its rows are visible in the pipeline's views.
	StageComplete
	// StageDurable: a restart of Feldera keeps it (at completion, or once
	// a checkpoint covers it under at_least_once).
	StageDurable
	// StageAcked: a status update told Postgres the slot may release it.
	StageAcked
	numStages
)

var names = [numStages]string{"sent", "complete", "durable", "acked"}

func (s Stage) String() string { return names[s] }

// Stages are the stage names, in order.
func Stages() []string { return names[:] }

// StageClock times each source transaction with rows, from its commit
// time on the server to each stage, free of I/O. Transactions enter in
// source order by their end LSN; each stage has a position that only
// grows (the highest LSN it covers), and a stage's position reaching a
// transaction's end LSN times it for that stage, once. A transaction
// leaves once acknowledged.
//
// The commit time is the primary's clock and a stage's time this
// process's: a skew between them shifts every stage alike, so the
// differences between stages stay exact.
//
// Under a flood of small transactions waiting for a checkpoint the queue
// is bounded: past clockMax a new transaction merges into the last
// one, keeping the earlier commit time, so a time is never understated.
type StageClock struct {
	txns []txnTime
	next [numStages]int // per stage: the first transaction it has not timed
	pos  [numStages]pglogrepl.LSN
}

type txnTime struct {
	end    pglogrepl.LSN
	commit time.Time
}

const clockMax = 1 << 14

// Commit records a transaction with rows that ends at end.
func (c *StageClock) Commit(end pglogrepl.LSN, at time.Time) {
	if n := len(c.txns); n > 0 && end <= c.txns[n-1].end {
		return // not after the last: replayed, or out of order
	}
	if n := len(c.txns); n >= clockMax {
		c.txns[n-1].end = end
		return
	}
	c.txns = append(c.txns, txnTime{end: end, commit: at})
}

// Reach moves stage s to lsn and calls observe with the time of every
// transaction it reaches for the first time. A later stage reaches at
// least what an earlier one did: a transaction is never acknowledged
// before it is sent.
func (c *StageClock) Reach(s Stage, lsn pglogrepl.LSN, now time.Time, observe func(Stage, time.Duration)) {
	for st := StageSent; st <= s; st++ {
		if lsn <= c.pos[st] {
			continue
		}
		c.pos[st] = lsn
		for ; c.next[st] < len(c.txns) && c.txns[c.next[st]].end <= lsn; c.next[st]++ {
			observe(st, now.Sub(c.txns[c.next[st]].commit))
		}
	}
	if s == StageAcked && c.next[StageAcked] > 0 {
		k := c.next[StageAcked]
		c.txns = append(c.txns[:0], c.txns[k:]...)
		for st := range c.next {
			c.next[st] = max(c.next[st]-k, 0)
		}
	}
}
