package main

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// peakRSS alternates a 10k-row and an N-row transaction, each drained by a
// fresh pgfeldera process, and reports the peak RSS of each.
func (b *bench) peakRSS(rounds, rows int) (Result, error) {
	fmt.Printf("e: peak RSS, one transaction of 10000 vs %d rows\n", rows)
	var small, large []float64
	one := func(n int) (float64, error) {
		if err := b.exec("TRUNCATE t"); err != nil {
			return 0, err
		}
		slot := fmt.Sprintf("rss_%d", b.seq)
		if err := b.createSlot(slot); err != nil {
			return 0, err
		}
		defer b.dropSlot(slot)
		if err := b.exec(rowsSQL(1, n)); err != nil {
			return 0, err
		}
		end, err := b.lsn()
		if err != nil {
			return 0, err
		}
		p, err := b.startPGF(slot, "t", "pub", "never", nil, nil)
		if err != nil {
			return 0, err
		}
		_, err = p.waitFor("confirmed_flush_lsn", 10*time.Minute, func() (bool, error) {
			c, err := b.confirmed(slot)
			return c >= end, err
		})
		rss, _, serr := p.stop()
		if err == nil {
			err = serr
		}
		return float64(rss) / (1 << 20), err
	}
	for r := 0; r < rounds; r++ {
		s, err := one(10_000)
		if err != nil {
			return Result{}, err
		}
		l, err := one(rows)
		if err != nil {
			return Result{}, err
		}
		small, large = append(small, s), append(large, l)
		fmt.Printf("    round %d: 10k rows %.1f MiB, %d rows %.1f MiB\n", r+1, s, rows, l)
	}
	res := ratioResult("e", fmt.Sprintf("peak RSS of the pgfeldera process: %d-row transaction vs a 10,000-row one", rows), "MiB", "10,000-row transaction", small, large, 0)
	res.Target = "≤ 1.25 × the 10k-row figure and ≤ 64 MiB"
	res.Pass = res.Ratio <= 1.25 && res.PGFMedian <= 64
	return res, nil
}

// wideRows drains one transaction of 1,000 rows of 512 KB (incompressible,
// STORAGE EXTERNAL) with a fresh process per round and reports its peak
// RSS and the largest request body.
func (b *bench) wideRows(rounds int) (Result, error) {
	const n, width = 1000, 512 << 10
	fmt.Printf("g: peak RSS, one transaction of %d rows × %d KB\n", n, width>>10)
	var rss, bodies []float64
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE wide"); err != nil {
			return Result{}, err
		}
		slot := fmt.Sprintf("wide_%d", r)
		if err := b.createSlot(slot); err != nil {
			return Result{}, err
		}
		// md5 of random input: hex that no compressor shrinks much, and
		// STORAGE EXTERNAL stores it uncompressed anyway.
		if err := b.exec(fmt.Sprintf(`INSERT INTO wide SELECT g, (SELECT string_agg(md5(random()::text || g || s), '') FROM generate_series(1, %d) s) FROM generate_series(1, %d) g`, width/32, n)); err != nil {
			return Result{}, err
		}
		end, err := b.lsn()
		if err != nil {
			return Result{}, err
		}
		var mu sync.Mutex
		var maxBody, lines int
		p, err := b.startPGF(slot, "wide", "pub_wide", "never", nil, func(_ string, body []byte, _ time.Time) {
			mu.Lock()
			defer mu.Unlock()
			maxBody = max(maxBody, len(body))
			lines += strings.Count(string(body), "\n")
		})
		if err != nil {
			return Result{}, err
		}
		_, err = p.waitFor("confirmed_flush_lsn", 10*time.Minute, func() (bool, error) {
			c, err := b.confirmed(slot)
			return c >= end, err
		})
		peak, _, serr := p.stop()
		if err == nil {
			err = serr
		}
		b.dropSlot(slot)
		if err == nil && lines < n {
			err = p.failure(fmt.Sprintf("let the slot confirm %s but the double counted %d rows, want %d", end, lines, n))
		}
		if err != nil {
			return Result{}, err
		}
		rss = append(rss, float64(peak)/(1<<20))
		bodies = append(bodies, float64(maxBody)/(1<<20))
		fmt.Printf("    round %d: peak RSS %.1f MiB, largest body %.1f MiB\n", r+1, rss[r], bodies[r])
	}
	m := median(rss)
	return Result{Workload: "g", What: fmt.Sprintf("peak RSS of the pgfeldera process for one transaction of %d rows × %d KB", n, width>>10),
		Unit: "MiB", PGF: rss, PGFMedian: m, Target: "≤ 64 MiB", Pass: m <= 64,
		Extra: map[string]any{"largest_body_mib": bodies}}, nil
}
