package delivery

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestJoin(t *testing.T) {
	type keepalive struct {
		walEnd pglogrepl.LSN
		open   bool
	}
	for _, c := range []struct {
		name   string
		until  pglogrepl.LSN
		kas    []keepalive
		commit pglogrepl.LSN
		holds  bool
	}{
		{"nothing joined", 0, nil, 0, false},
		{"a COMMIT short of the WAL end", 0x5000, nil, 0x4010, true},
		{"a batch with no COMMIT", 0x5000, nil, 0, true},
		{"a COMMIT at the WAL end", 0x5000, nil, 0x5000, false},
		{"a COMMIT past it", 0x5000, nil, 0x6010, false},
		{"a keepalive short of the WAL end", 0x5000, []keepalive{{0x4fff, false}}, 0x4010, true},
		// PostgreSQL 18 sends a keepalive at the slot's position as
		// streaming starts: it says nothing of what follows.
		{"the first keepalive at the slot's position", 0x5000, []keepalive{{0x1000, false}}, 0, true},
		{"a keepalive at the WAL end inside a transaction", 0x5000, []keepalive{{0x5000, true}}, 0x4010, true},
		{"a keepalive at the WAL end, nothing open", 0x5000, []keepalive{{0x5000, false}}, 0x4010, false},
		{"reached stays reached", 0x5000, []keepalive{{0x5100, false}, {0x5200, true}}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := Join{Until: c.until}
			for _, k := range c.kas {
				j.Keepalive(k.walEnd, k.open)
			}
			if got := j.Holds(c.commit); got != c.holds {
				t.Fatalf("Holds(%s) = %v, want %v", c.commit, got, c.holds)
			}
			j.Ended()
			if j.Holds(0) {
				t.Fatal("an ended join still holds")
			}
		})
	}
}
