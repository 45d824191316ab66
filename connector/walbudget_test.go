package connector

import (
	"testing"
	"time"
)

func TestWalBudget(t *testing.T) {
	for _, c := range []struct {
		setting, keep, want int64
	}{
		{0, -1, 0},              // unset, unlimited: none
		{0, 1 << 30, 256 << 20}, // unset: a quarter of max_slot_wal_keep_size
		{0, 0, 0},               // max_slot_wal_keep_size = 0 is unlimited too
		{64 << 20, -1, 64 << 20},
		{64 << 20, 1 << 30, 64 << 20}, // the setting wins
		{-1, 1 << 30, 0},              // off
	} {
		if got := walBudget(c.setting, c.keep); got != c.want {
			t.Errorf("walBudget(%d, %d) = %d, want %d", c.setting, c.keep, got, c.want)
		}
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
