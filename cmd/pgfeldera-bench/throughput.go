package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// streamRounds runs load, then drains the same WAL with pg_recvlogical and
// pgfeldera (order alternating per round) and returns rows/s for each.
func (b *bench) streamRounds(rounds, rows int, withRaw bool, load func(round int) string) (ref, pgfRates []float64, cpu map[string][]float64, err error) {
	cpu = map[string][]float64{}
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE t"); err != nil {
			return nil, nil, nil, err
		}
		refSlot, pgfSlot, rawSlot := fmt.Sprintf("ref_%d", b.seq+r), fmt.Sprintf("pgf_%d", b.seq+r), fmt.Sprintf("raw_%d", b.seq+r)
		if err := b.createSlot(refSlot); err != nil {
			return nil, nil, nil, err
		}
		if withRaw {
			if err := b.createSlot(rawSlot); err != nil {
				return nil, nil, nil, err
			}
		}
		if err := b.createSlot(pgfSlot); err != nil {
			return nil, nil, nil, err
		}
		if err := b.exec(load(r)); err != nil {
			return nil, nil, nil, err
		}
		end, err := b.lsn()
		if err != nil {
			return nil, nil, nil, err
		}
		var refD, pgfD time.Duration
		var refCPU, pgfCPU float64
		runRef := func() error { refD, refCPU, err = b.recvlogical(refSlot, "pub", end); return err }
		runPGF := func() error { pgfD, pgfCPU, err = b.drainPGF(pgfSlot, end, rows); return err }
		if err := alternate(r, runRef, runPGF); err != nil {
			return nil, nil, nil, err
		}
		if withRaw {
			// Last, on its own slot over the same WAL: the cache is as warm
			// as for the second of the two above.
			d, err := b.rawDrain(rawSlot, "pub", rows)
			if err != nil {
				return nil, nil, nil, err
			}
			cpu["raw"] = append(cpu["raw"], float64(rows)/d.Seconds())
			fmt.Printf("    round %d: raw reader %.0f rows/s\n", r+1, float64(rows)/d.Seconds())
			b.dropSlot(rawSlot)
		}
		ref = append(ref, float64(rows)/refD.Seconds())
		pgfRates = append(pgfRates, float64(rows)/pgfD.Seconds())
		cpu["pg_recvlogical"] = append(cpu["pg_recvlogical"], refCPU)
		cpu["pgfeldera"] = append(cpu["pgfeldera"], pgfCPU)
		fmt.Printf("    round %d: pg_recvlogical %.0f rows/s (%.2f CPU s), pgfeldera %.0f rows/s (%.2f CPU s)\n", r+1, ref[r], refCPU, pgfRates[r], pgfCPU)
		b.dropSlot(refSlot)
		b.dropSlot(pgfSlot)
	}
	return ref, pgfRates, cpu, nil
}

// alternate runs the reference first in even rounds (0, 2, …) and
// pgfeldera first in odd ones, so neither always gets the warmer cache.
func alternate(round int, ref, pgf func() error) error {
	if round%2 == 1 {
		ref, pgf = pgf, ref
	}
	if err := ref(); err != nil {
		return err
	}
	return pgf()
}

func (b *bench) bulk(rounds, rows int) (Result, error) {
	fmt.Printf("a: bulk catch-up, %d rows in 100 transactions\n", rows)
	ref, pgf, cpu, err := b.streamRounds(rounds, rows, b.raw, func(int) string { return bulkSQL(rows) })
	if err != nil {
		return Result{}, err
	}
	res := ratioResult("a", fmt.Sprintf("bulk catch-up: %d rows in 100 transactions", rows), "rows/s", "pg_recvlogical", ref, pgf, 0.8)
	if raw := cpu["raw"]; len(raw) > 0 {
		h := ratioResult("h", fmt.Sprintf("bulk catch-up as in a, against a raw reader of the same stream that only counts inserts (the walsender's ceiling); pg_recvlogical %.0f rows/s", res.RefMedian), "rows/s", "raw reader", raw, pgf, 0.9)
		b.rawResult = &h
		delete(cpu, "raw")
	}
	res.Extra = cpuExtra(cpu, rows)
	return res, nil
}

// bulkSQL inserts rows into t in 100 transactions.
func bulkSQL(rows int) string {
	per := rows / 100
	return fmt.Sprintf(`DO $$ BEGIN FOR i IN 0..99 LOOP %s; COMMIT; END LOOP; END $$`,
		strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", fmt.Sprintf("generate_series(i * %d + 1, (i + 1) * %d)", per, per)))
}

func (b *bench) singleRow(rounds, txns int) (Result, error) {
	fmt.Printf("b: %d single-row transactions\n", txns)
	ref, pgf, cpu, err := b.streamRounds(rounds, txns, false, func(int) string {
		return fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; COMMIT; END LOOP; END $$`, txns,
			strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", "generate_series(i, i)"))
	})
	if err != nil {
		return Result{}, err
	}
	res := ratioResult("b", fmt.Sprintf("%d single-row transactions", txns), "rows/s", "pg_recvlogical", ref, pgf, 0.7)
	res.Extra = cpuExtra(cpu, txns)
	return res, nil
}

// incremental is SNAPSHOT_MODE=incremental against initial, side by
// side, each from process start to the last row in Feldera, and both
// against COPY to /dev/null (target ≥ 0.8 × initial).
func (b *bench) incremental(rounds, rows int) (Result, error) {
	fmt.Printf("k: incremental snapshot of %d rows against initial\n", rows)
	for _, q := range []string{"TRUNCATE t", rowsSQL(1, rows), "VACUUM ANALYZE t"} {
		if err := b.exec(q); err != nil {
			return Result{}, err
		}
	}
	copyRate, err := b.timeCopy(rows)
	if err != nil {
		return Result{}, err
	}
	// pgfeldera's CPU seconds per run, by mode and lanes: the split the
	// ratio depends on, on a machine whose CPUs the runs saturate.
	cpu := map[string][]float64{}
	var ref, inc, inc2 []float64
	for r := 0; r < rounds; r++ {
		runRef := func() error {
			v, err := b.snapshotLoad("initial", r, 1, rows, cpu)
			ref = append(ref, v)
			return err
		}
		runInc := func() error {
			v, err := b.snapshotLoad("incremental", r, 1, rows, cpu)
			inc = append(inc, v)
			if err != nil {
				return err
			}
			v, err = b.snapshotLoad("incremental", r, 2, rows, cpu)
			inc2 = append(inc2, v)
			return err
		}
		if err := alternate(r, runRef, runInc); err != nil {
			return Result{}, err
		}
		fmt.Printf("    round %d: initial %.0f rows/s (%.2f CPU s), incremental %.0f rows/s (%.2f CPU s), at parallelism 2 %.0f rows/s (%.2f CPU s)\n",
			r+1, ref[r], cpu["initial"][r], inc[r], cpu["incremental"][r], inc2[r], cpu["incremental_2"][r])
	}
	res := ratioResult("k", fmt.Sprintf("incremental snapshot of %d rows, SNAPSHOT_PARALLELISM 1 (chunks of the default SNAPSHOT_CHUNK_ROWS), against initial; at SNAPSHOT_PARALLELISM 2: %.0f rows/s, %.2f × initial; COPY to /dev/null %.0f rows/s, incremental ÷ COPY %.2f (parallelism 2: %.2f)",
		rows, median(inc2), median(inc2)/median(ref), copyRate, median(inc)/copyRate, median(inc2)/copyRate),
		"rows/s", "SNAPSHOT_MODE=initial", ref, inc, 0.8)
	res.Extra = cpuExtra(cpu, rows)
	return res, nil
}

// timeCopy times COPY t TO STDOUT through psql into /dev/null: the rows/s
// Postgres alone reads the table at, the ceiling for a snapshot.
func (b *bench) timeCopy(rows int) (float64, error) {
	copyStart := time.Now()
	cmd := exec.Command(filepath.Join(b.cluster.BinDir, "psql"), "-X", "-q", "-d", b.dsn, "-c", "COPY t TO STDOUT")
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	cmd.Stdout = devnull
	err = cmd.Run()
	devnull.Close()
	if err != nil {
		return 0, fmt.Errorf("psql COPY: %w", err)
	}
	return float64(rows) / time.Since(copyStart).Seconds(), nil
}

// snapshotLoad runs one snapshot of t in mode with lanes lanes on its own
// slot and returns its rows/s, adding its CPU seconds to cpu by mode and lanes.
func (b *bench) snapshotLoad(mode string, r, lanes, rows int, cpu map[string][]float64) (float64, error) {
	slot := fmt.Sprintf("inc_%s_%d_%d", mode, lanes, r)
	p, err := b.startPGF(slot, "t", "pub", mode, map[string]string{"SNAPSHOT_PARALLELISM": strconv.Itoa(lanes)}, nil)
	if err != nil {
		return 0, err
	}
	d, err := p.waitFor("the "+mode+" snapshot", 10*time.Minute, func() (bool, error) { return p.fel.CountedRows("t") >= rows, nil })
	_, sec, serr := p.stop()
	if err == nil {
		err = serr
	}
	key := mode
	if lanes > 1 {
		key += "_" + strconv.Itoa(lanes)
	}
	cpu[key] = append(cpu[key], sec)
	b.dropSlot(slot)
	return float64(rows) / d.Seconds(), err
}

func (b *bench) snapshot(rounds, rows int) (Result, error) {
	fmt.Printf("c: snapshot of %d rows\n", rows)
	if err := b.exec("TRUNCATE t"); err != nil {
		return Result{}, err
	}
	if err := b.exec(rowsSQL(1, rows)); err != nil {
		return Result{}, err
	}
	if err := b.exec("VACUUM ANALYZE t"); err != nil {
		return Result{}, err
	}
	copyRef := func() (time.Duration, error) {
		cmd := exec.Command(filepath.Join(b.cluster.BinDir, "psql"), "-X", "-q", "-d", b.dsn, "-c", "COPY t TO STDOUT")
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		defer devnull.Close()
		var errb strings.Builder
		cmd.Stdout, cmd.Stderr = devnull, &errb // an os.File: psql writes to /dev/null itself
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("psql COPY: %w: %s", err, errb.String())
		}
		return time.Since(start), nil
	}
	if _, err := copyRef(); err != nil { // warm the cache and hint bits
		return Result{}, err
	}
	var ref, pgfRates []float64
	for r := 0; r < rounds; r++ {
		runRef := func() error {
			d, err := copyRef()
			ref = append(ref, float64(rows)/d.Seconds())
			return err
		}
		runPGF := func() error {
			slot := fmt.Sprintf("snap_%d", r)
			p, err := b.startPGF(slot, "t", "pub", "initial", nil, nil)
			if err != nil {
				return err
			}
			d, err := p.waitFor("the snapshot", 10*time.Minute, func() (bool, error) { return p.fel.CountedRows("t") >= rows, nil })
			if _, _, serr := p.stop(); err == nil {
				err = serr
			}
			if err == nil {
				pgfRates = append(pgfRates, float64(rows)/d.Seconds())
			}
			b.dropSlot(slot)
			return err
		}
		if err := alternate(r, runRef, runPGF); err != nil {
			return Result{}, err
		}
		fmt.Printf("    round %d: COPY %.0f rows/s, pgfeldera %.0f rows/s\n", r+1, ref[r], pgfRates[r])
	}
	return ratioResult("c", fmt.Sprintf("snapshot of %d rows (pgfeldera: process start to the last row in Feldera)", rows), "rows/s", "COPY TO STDOUT via psql", ref, pgfRates, 0.6), nil
}

// slowCompletion drains the same bulk load as a while the double completes
// each request d after it arrives, for d in 0, 50, 250 and 1000 ms (the
// order rotating per round), and reports throughput per delay and its
// ratio to 0 ms.
func (b *bench) slowCompletion(rounds, rows int) (Result, error) {
	delays := []time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, time.Second}
	fmt.Printf("f: bulk catch-up of %d rows in 100 transactions, completion delayed %v\n", rows, delays)
	rates := map[time.Duration][]float64{}
	defer func() { b.delay = 0 }()
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE t"); err != nil {
			return Result{}, err
		}
		slots := make([]string, len(delays))
		for i := range delays {
			slots[i] = fmt.Sprintf("slow_%d_%d", r, i)
			if err := b.createSlot(slots[i]); err != nil {
				return Result{}, err
			}
		}
		if err := b.exec(bulkSQL(rows)); err != nil {
			return Result{}, err
		}
		end, err := b.lsn()
		if err != nil {
			return Result{}, err
		}
		for k := range delays {
			i := (k + r) % len(delays)
			b.delay = delays[i]
			d, _, err := b.drainPGF(slots[i], end, rows)
			if err != nil {
				return Result{}, fmt.Errorf("completion delay %s: %w", delays[i], err)
			}
			rates[delays[i]] = append(rates[delays[i]], float64(rows)/d.Seconds())
			b.dropSlot(slots[i])
		}
		fmt.Printf("    round %d:", r+1)
		for _, d := range delays {
			fmt.Printf(" %s %.0f rows/s;", d, rates[d][r])
		}
		fmt.Println()
	}
	base := median(rates[0])
	extra := map[string]any{}
	pass := true
	for _, d := range delays {
		ratio := median(rates[d]) / base
		extra[fmt.Sprintf("rows_per_s_%dms", d.Milliseconds())] = rates[d]
		extra[fmt.Sprintf("ratio_%dms", d.Milliseconds())] = ratio
		switch d {
		case 250 * time.Millisecond:
			pass = pass && ratio >= 0.9
		case time.Second:
			pass = pass && ratio >= 0.7
		}
	}
	slow := median(rates[250*time.Millisecond])
	return Result{Workload: "f", What: fmt.Sprintf("bulk catch-up of %d rows, each request completing 0/50/250/1000 ms after it arrives; ratio at 250 ms", rows),
		Unit: "rows/s", Reference: "0 ms completion", Ref: rates[0], PGF: rates[250*time.Millisecond], RefMedian: base, PGFMedian: slow, Ratio: slow / base,
		Target: "≥ 0.9 × at 250 ms, ≥ 0.7 × at 1000 ms", Pass: pass, Extra: extra}, nil
}

// transactionsCost measures FELDERA_TRANSACTIONS=auto against off on
// two-table transactions (one row into t, one into t2): the catch-up of
// txns of them, each mode on its own slot over the same WAL in alternating
// order, and commit → confirmed latency under a live load.
// catchUp measures, per value of setting (modes: the reference first),
// how fast pgfeldera catches up on what fill writes (rows rows into
// tables): each round truncates, creates a slot per mode, fills, and runs
// the modes in alternating order, each from its own slot. A mode other
// than "off" must have committed a Feldera transaction.
func (b *bench) catchUp(rounds, rows int, tables, pub, fill, setting string, modes []string) (map[string][]float64, error) {
	rates := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE t, t2"); err != nil {
			return nil, err
		}
		slots := map[string]string{}
		for _, m := range modes {
			slots[m] = fmt.Sprintf("txn_%s_%d_%d", m, r, b.seq)
			if err := b.createSlot(slots[m]); err != nil {
				return nil, err
			}
		}
		if err := b.exec(fill); err != nil {
			return nil, err
		}
		end, err := b.lsn()
		if err != nil {
			return nil, err
		}
		for k := range modes {
			m := modes[(k+r)%len(modes)]
			p, err := b.startPGF(slots[m], tables, pub, "never", map[string]string{setting: m}, nil)
			if err != nil {
				return nil, err
			}
			d, err := p.waitFor("confirmed_flush_lsn "+end.String(), 10*time.Minute, func() (bool, error) {
				c, err := b.confirmed(slots[m])
				return c >= end, err
			})
			got := p.fel.CountedRows("t") + p.fel.CountedRows("t2")
			committed := p.fel.TransactionsCommitted()
			if _, _, serr := p.stop(); err == nil {
				err = serr
			}
			if err == nil && got < rows {
				err = fmt.Errorf("%s, %s=%s: the double counted %d rows, want %d", tables, setting, m, got, rows)
			}
			if err == nil && m != "off" && committed == 0 {
				err = fmt.Errorf("%s, %s=%s committed no Feldera transaction", tables, setting, m)
			}
			if err != nil {
				return nil, err
			}
			rates[m] = append(rates[m], float64(rows)/d.Seconds())
			b.dropSlot(slots[m])
		}
		fmt.Printf("    round %d, %s: %s %s %.0f rows/s, %s %.0f rows/s\n", r+1, tables, setting, modes[0], rates[modes[0]][r], modes[1], rates[modes[1]][r])
	}
	return rates, nil
}

// txnModes are j's FELDERA_TRANSACTIONS values, the reference first.
var txnModes = []string{"off", "auto"}

func (b *bench) transactionsCost(rounds, txns, rate int, dur time.Duration) (Result, error) {
	fmt.Printf("j: FELDERA_TRANSACTIONS auto vs off: catch-up of %d two-table transactions, and of %d two-row transactions of one table; live at %d transactions/s\n", txns, txns, rate/10)
	rows := 2 * txns
	one := strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", "generate_series(i, i)")
	// Two tables, a row each: wrapped by auto since it was written.
	rates, err := b.catchUp(rounds, rows, "t,t2", "pub_two",
		fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; INSERT INTO t2 VALUES (i, i, 1); COMMIT; END LOOP; END $$`, txns, one), "FELDERA_TRANSACTIONS", txnModes)
	if err != nil {
		return Result{}, err
	}
	// One table, two rows a transaction (a transfer): Feldera may feed a
	// request to its steps in parts, so auto wraps these too.
	two := strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0) g", fmt.Sprintf("(VALUES (i), (i + %d)) AS v(g)", txns))
	oneTable, err := b.catchUp(rounds, rows, "t", "pub",
		fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; COMMIT; END LOOP; END $$`, txns, two), "FELDERA_TRANSACTIONS", txnModes)
	if err != nil {
		return Result{}, err
	}
	extra := map[string]any{}
	for _, m := range []string{"off", "auto"} {
		sql := "BEGIN;\nINSERT INTO live (payload) VALUES ('p');\nINSERT INTO t2 VALUES (100000000 + (random() * 1000000000)::bigint, 1, 1) ON CONFLICT DO NOTHING;\nCOMMIT;\n"
		p50, p99, mx, n, err := b.commitToConfirmed("lat_"+m, "live,t2", "pub_live_two", sql, rate/10, dur, map[string]string{"FELDERA_TRANSACTIONS": m})
		if err != nil {
			return Result{}, fmt.Errorf("latency, FELDERA_TRANSACTIONS=%s: %w", m, err)
		}
		fmt.Printf("    live, %s: %d positions; p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", m, n, p50, p99, mx)
		extra["p50_ms_"+m], extra["p99_ms_"+m], extra["max_ms_"+m] = p50, p99, mx
	}
	off, auto := median(rates["off"]), median(rates["auto"])
	extra["rows_per_s_off"], extra["rows_per_s_auto"] = rates["off"], rates["auto"]
	extra["one_table_rows_per_s_off"], extra["one_table_rows_per_s_auto"] = oneTable["off"], oneTable["auto"]
	extra["one_table_ratio"] = median(oneTable["auto"]) / median(oneTable["off"])
	fmt.Printf("    one table, two rows a transaction: auto/off %.2f\n", extra["one_table_ratio"])
	return Result{Workload: "j", What: fmt.Sprintf("catch-up of %d two-table transactions (t and t2, a row each), FELDERA_TRANSACTIONS=auto against off; p99 commit → confirmed under a live two-table load in Extra", txns),
		Unit: "rows/s", Reference: "FELDERA_TRANSACTIONS=off", Ref: rates["off"], PGF: rates["auto"], RefMedian: off, PGFMedian: auto, Ratio: auto / off,
		Target: "≥ 0.8 ×", Pass: auto/off >= 0.8, Extra: extra}, nil
}
