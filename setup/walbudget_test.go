package setup

import "testing"

func TestWalBudget(t *testing.T) {
	const maxWAL = 1 << 30
	for _, c := range []struct {
		setting, keep, want int64
	}{
		{0, -1, 0},              // unset, unlimited: none
		{0, 1 << 30, 256 << 20}, // unset: a quarter of max_slot_wal_keep_size
		{0, 0, 256 << 20},       // 0: nothing kept beyond max_wal_size, a quarter of that
		{64 << 20, -1, 64 << 20},
		{64 << 20, 1 << 30, 64 << 20}, // the setting wins
		{-1, 1 << 30, 0},              // off
	} {
		if got := walBudget(c.setting, c.keep, maxWAL); got != c.want {
			t.Errorf("walBudget(%d, %d, %d) = %d, want %d", c.setting, c.keep, maxWAL, got, c.want)
		}
	}
}
