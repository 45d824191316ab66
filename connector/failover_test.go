package connector

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestParseFork(t *testing.T) {
	history := "1\t0/3000158\tno recovery target specified\n\n2\t0/5000A28\tno recovery target specified\n"
	for _, c := range []struct {
		old  int32
		want string
	}{{1, "0/3000158"}, {2, "0/5000A28"}} {
		got, err := parseFork(history, 3, c.old)
		if err != nil || got.String() != c.want {
			t.Errorf("old %d: %s, %v; want %s", c.old, got, err, c.want)
		}
	}
	if _, err := parseFork(history, 3, 3); err == nil || !strings.Contains(err.Error(), "timeline 3") {
		t.Errorf("a timeline the history does not end: %v", err)
	}
	if _, err := parseFork("1\tnot-an-lsn\tx\n", 2, 1); err == nil {
		t.Error("a bad line accepted")
	}
	var zero pglogrepl.LSN
	if got, _ := parseFork("", 2, 1); got != zero {
		t.Error("an empty history gave a fork")
	}
}

func TestServerMajor(t *testing.T) {
	for v, want := range map[string]int{"17.10 (Debian 17.10-1)": 17, "18beta1": 18, "15.18": 15} {
		if got, err := serverMajor(v); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", v, got, err, want)
		}
	}
	if _, err := serverMajor(""); err == nil {
		t.Error("an empty server_version accepted")
	}
}

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
			if got := sentBound(tc.received, commit, tc.openRows) > tc.fork; got != tc.phantom {
				t.Fatalf("past the fork = %v, want %v", got, tc.phantom)
			}
		})
	}
}
