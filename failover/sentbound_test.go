package failover

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// A batch with rows of the open transaction may hold changes up to just
// past that transaction's commit record's start: a fork exactly there
// (the commit record missing on the new timeline) must show as past.
func TestSentBound(t *testing.T) {
	const commit = pglogrepl.LSN(0x19F7938)
	for _, tc := range []struct {
		name     string
		received pglogrepl.LSN
		openRows bool
		fork     pglogrepl.LSN
		phantom  bool
	}{
		{"whole transactions before the fork", 0x19F7000, false, 0x19F7938, false},
		{"rows read at the commit's start, fork there", commit, true, commit, true},
		{"rows read, fork after the commit record", commit, true, commit + 0x40, false},
		{"a COMMIT read at its end past the fork", commit + 0x30, false, commit, true},
		{"an open transaction with no rows in the batch", commit, false, commit, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SentBound(tc.received, commit, tc.openRows) > tc.fork; got != tc.phantom {
				t.Fatalf("past the fork = %v, want %v", got, tc.phantom)
			}
		})
	}
}
