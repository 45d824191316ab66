package incremental

import (
	"testing"
	"time"
)

// A chunk waiting for its high watermark gets a status update (a nudge
// to the walsender) WatermarkNudge after it was handed, then one every
// WatermarkNudge after the last status update; none while no chunk waits.
func TestNudgeAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name               string
		handed, lastStatus time.Time
		want               time.Time
		ok                 bool
	}{
		{"no chunk waits", time.Time{}, t0, time.Time{}, false},
		{"status before the chunk was handed", t0, t0.Add(-time.Second), t0.Add(WatermarkNudge), true},
		{"never a status", t0, time.Time{}, t0.Add(WatermarkNudge), true},
		{"status since the chunk was handed", t0, t0.Add(300 * time.Millisecond), t0.Add(300*time.Millisecond + WatermarkNudge), true},
		{"status at the same instant", t0, t0, t0.Add(WatermarkNudge), true},
	} {
		got, ok := NudgeAt(c.handed, c.lastStatus)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("%s: NudgeAt = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
