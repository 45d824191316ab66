package delivery

import (
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/decode"
)

// A transaction is skipped exactly when its commit record starts below
// the progress row's position; its changes and TRUNCATEs are dropped,
// nothing else is, and the first transaction not skipped ends the skip.
func TestProgressSkip(t *testing.T) {
	type txn struct {
		final pglogrepl.LSN
		drop  bool // its changes are dropped
	}
	for _, c := range []struct {
		name  string
		below pglogrepl.LSN
		txns  []txn
		ended int // which transaction ends the skip (-1: none)
	}{
		{"nothing to skip", 0, []txn{{0x100, false}, {0x200, false}}, -1},
		{"below the row", 0x310, []txn{{0x100, true}, {0x300, true}, {0x400, false}, {0x200, false}}, 2},
		{"a commit starting at the row is not Feldera's", 0x300, []txn{{0x200, true}, {0x300, false}}, 1},
		{"all below", 0x1000, []txn{{0x100, true}, {0x200, true}}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := &ProgressSkip{Below: c.below}
			ended, skipped := -1, 0
			for i, tx := range c.txns {
				if k.Begin(tx.final) {
					ended = i
				}
				for _, m := range []byte{decode.MsgInsert, decode.MsgUpdate, decode.MsgDelete, decode.MsgTruncate} {
					if got := k.Drops([]byte{m}); got != tx.drop {
						t.Fatalf("transaction %d (final %s), message %c: dropped %v, want %v", i, tx.final, m, got, tx.drop)
					}
				}
				for _, m := range []byte{decode.MsgRelation, decode.MsgMessage, decode.MsgType, decode.MsgCommit} {
					if k.Drops([]byte{m}) {
						t.Fatalf("transaction %d: message %c dropped", i, m)
					}
				}
				k.Commit()
				if tx.drop {
					skipped++
				}
				if k.Drops([]byte{decode.MsgInsert}) {
					t.Fatalf("a change after transaction %d's COMMIT dropped", i)
				}
			}
			if ended != c.ended || k.Skipped != skipped {
				t.Fatalf("ended at %d, skipped %d; want %d, %d", ended, k.Skipped, c.ended, skipped)
			}
		})
	}
}
