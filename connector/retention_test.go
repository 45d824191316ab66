package connector_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// How far confirmed_flush_lsn trails the WAL head under the checkpoint
// gate, in bytes and in time, against the pipeline's checkpoint interval,
// beside the complete gate in the same run. A measurement, not a check,
// so a benchmark (one pass each, about a minute in all):
// go test ./connector -run '^$' -bench WALRetention -v
// (docs/operations.md records a run).
func BenchmarkWALRetention(b *testing.B) {
	for _, c := range []struct {
		name  string
		ft    string
		every time.Duration
	}{
		{"exactly_once (complete gate)", `{"model": "exactly_once"}`, 2 * time.Second},
		{"at_least_once, checkpoint every 1s", `{"model": "at_least_once"}`, time.Second},
		{"at_least_once, checkpoint every 2s", `{"model": "at_least_once"}`, 2 * time.Second},
		{"at_least_once, checkpoint every 5s", `{"model": "at_least_once"}`, 5 * time.Second},
	} {
		b.Run(c.name, func(b *testing.B) {
			var t testing.TB = b
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
				fc.FaultTolerance = c.ft
				fc.CheckpointEvery = c.every
			})
			cfg := e.config("users,public.items:catalog_items")
			cfg.CheckpointAfter = time.Hour // the pipeline's interval alone
			e.start(cfg)
			e.waitSlot()
			w := e.startWriter("users", 0)
			type sample struct {
				at              time.Time
				head, confirmed pglogrepl.LSN
			}
			var samples []sample
			end := time.Now().Add(12 * time.Second)
			for time.Now().Before(end) {
				var head, conf string
				if err := e.db.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&head, &conf); err != nil {
					t.Fatal(err)
				}
				h, _ := pglogrepl.ParseLSN(head)
				cf, _ := pglogrepl.ParseLSN(conf)
				samples = append(samples, sample{time.Now(), h, cf})
				time.Sleep(50 * time.Millisecond)
			}
			w.halt()
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			e.assertEqual("users", "users")
			// Skip the first 2 s (start-up), then: bytes behind the head,
			// and how long ago the head was where the slot now is.
			var bytes, ages []float64
			for i, s := range samples {
				if s.at.Sub(samples[0].at) < 2*time.Second {
					continue
				}
				bytes = append(bytes, float64(s.head-s.confirmed))
				j := i
				for j > 0 && samples[j-1].head > s.confirmed {
					j--
				}
				ages = append(ages, s.at.Sub(samples[j].at).Seconds())
			}
			sort.Float64s(bytes)
			sort.Float64s(ages)
			q := func(v []float64, p float64) float64 { return v[int(p*float64(len(v)-1))] }
			t.Logf("| %s | %.0f KiB | %.0f KiB | %.1f s | %.1f s |", c.name, q(bytes, 0.5)/1024, q(bytes, 1)/1024, q(ages, 0.5), q(ages, 1))
		})
	}
}
