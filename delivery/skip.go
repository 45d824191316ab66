package delivery

import (
	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/decode"
)

// ProgressSkip is the rule by which a session skips, whole, the source
// transactions the progress row says Feldera holds (Progress): a commit
// record that starts below the row's position ends at or below it
// (commit records do not overlap, and the row holds a commit's end), so
// its transaction is Feldera's; one that starts at it or later is not.
// The changes and TRUNCATEs of a skipped transaction are dropped before
// they are decoded; its BEGIN, COMMIT, RELATION and logical messages are
// not (the decoder keeps its relations, and the ledger acknowledges the
// COMMIT as one with nothing buffered).
type ProgressSkip struct {
	Below    pglogrepl.LSN // the progress row's position; 0: nothing to skip
	Skipped  int           // source transactions skipped
	skipping bool          // the open transaction is skipped
}

// Drops reports whether the pgoutput message data is dropped undecoded.
func (k *ProgressSkip) Drops(data []byte) bool {
	if !k.skipping || len(data) == 0 {
		return false
	}
	switch data[0] {
	case decode.MsgInsert, decode.MsgUpdate, decode.MsgDelete, decode.MsgTruncate:
		return true
	}
	return false
}

// Begin applies a BEGIN whose commit record starts at final; it reports
// whether it ends the skip (the first transaction Feldera lacks).
func (k *ProgressSkip) Begin(final pglogrepl.LSN) (ended bool) {
	if k.Below == 0 {
		return false
	}
	if final < k.Below {
		k.skipping = true
		return false
	}
	k.Below = 0
	return true
}

// Commit applies a COMMIT.
func (k *ProgressSkip) Commit() {
	if k.skipping {
		k.skipping = false
		k.Skipped++
	}
}
