package replconn_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/replconn"
)

// A Standby Status Update carries its three positions as given: a flush
// position of 0 stays 0 (pglogrepl's SendStandbyStatusUpdate would copy the
// write position into it, and acknowledge what Feldera has not completed).
func TestEncodeStatus(t *testing.T) {
	at := time.Date(2000, 1, 1, 0, 0, 1, 0, time.UTC)
	for _, c := range []struct {
		write, flush, apply pglogrepl.LSN
		reply               bool
	}{{0x500, 0, 0, false}, {0x500, 0x400, 0x300, true}} {
		b := replconn.EncodeStatus(c.write, c.flush, c.apply, at, c.reply)
		if len(b) != 34 || b[0] != 'r' {
			t.Fatalf("% x", b)
		}
		u := func(i int) uint64 { return binary.BigEndian.Uint64(b[1+8*i:]) }
		if u(0) != uint64(c.write) || u(1) != uint64(c.flush) || u(2) != uint64(c.apply) || u(3) != 1_000_000 || (b[33] == 1) != c.reply {
			t.Errorf("%+v: write %x flush %x apply %x clock %d reply %d", c, u(0), u(1), u(2), u(3), b[33])
		}
	}
}

// The status interval is a third of wal_sender_timeout, within [0.5 s, 10 s],
// and 10 s when the timeout is off.
func TestStatusInterval(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		0: 10 * time.Second, 60 * time.Second: 10 * time.Second, 9 * time.Second: 3 * time.Second, time.Second: 500 * time.Millisecond,
	} {
		if got := replconn.StatusInterval(in); got != want {
			t.Errorf("StatusInterval(%v) = %v, want %v", in, got, want)
		}
	}
}
