package crashtest_test

import (
	"syscall"
	"testing"
	"time"
)

// One transaction of 1,000 rows of 512 KB (incompressible, stored
// uncompressed) arrives exactly, and the process's peak RSS stays under a
// generous bound: BATCH_MAX_BYTES seals batches by size, so at most two
// batches of about 16 MiB are held, whatever the transaction's size. With
// the byte bound at 1 GiB the whole 512 MB transaction is one batch, and
// the same check sees it. (The tight figure is the benchmark's, g.)
func TestWideRows_PeakRSSBounded(t *testing.T) {
	const bound = 192 << 20
	for _, tc := range []struct {
		name  string
		env   []string
		under bool
	}{
		{"default BATCH_MAX_BYTES", nil, true},
		{"BATCH_MAX_BYTES=1GiB", []string{"BATCH_MAX_BYTES=1GiB", "BATCH_MAX_ROWS=10000"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, nil)
			w.exec("ALTER TABLE users ALTER COLUMN name SET STORAGE EXTERNAL")
			p := w.start(append([]string{"SNAPSHOT_MODE=never"}, tc.env...)...)
			w.poll("streaming", 30*time.Second, p.streaming)
			// md5 of random input: 16,384 × 32 hex digits = 512 KiB a row.
			w.exec(`INSERT INTO users SELECT g, (SELECT string_agg(md5(random()::text || g || s), '') FROM generate_series(1, 16384) s), g FROM generate_series(1, 1000) g`)
			if msg := w.caughtUp(p, 180*time.Second); msg != "" {
				t.Fatal(msg)
			}
			if code := p.stop(t); code != 0 {
				t.Fatalf("exit %d\n%s", code, w.log())
			}
			ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
			if !ok {
				t.Fatal("no rusage")
			}
			peak := ru.Maxrss << 10
			t.Logf("peak RSS %.1f MiB", float64(peak)/(1<<20))
			if tc.under && peak > bound {
				t.Fatalf("peak RSS %.1f MiB for 512 MB in one transaction, more than %d MiB: the byte bound does not hold", float64(peak)/(1<<20), bound>>20)
			}
			if !tc.under && peak <= bound {
				t.Fatalf("with the byte bound at 1 GiB the peak RSS was only %.1f MiB: the check cannot see a batch held whole", float64(peak)/(1<<20))
			}
		})
	}
}
