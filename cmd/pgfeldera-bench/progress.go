package main

import (
	"fmt"
	"strings"
)

// progressModes are l's FELDERA_PROGRESS_TABLE values, the reference
// first.
var progressModes = []string{"off", "on"}

// progressCost measures FELDERA_PROGRESS_TABLE=on against off (target:
// cost ≤ 10 %): the catch-up of a's bulk load (rows in 100 transactions)
// of b's single-row transactions and of j's two-table ones, each mode on its own slot over the
// same WAL, order alternating. With the table every flush is a Feldera
// transaction that ends with the slot's row, and its commit waits until
// Feldera fed every row; the double steps at once, so the figures are
// pgfeldera's round trips, not a Feldera's commits.
func (b *bench) progressCost(rounds, rows, txns int) (Result, error) {
	fmt.Printf("l: FELDERA_PROGRESS_TABLE on vs off: catch-up of %d rows in 100 transactions, of %d single-row transactions and of %d two-table ones\n", rows, txns, txns)
	bulk, err := b.catchUp(rounds, rows, "t", "pub", bulkSQL(rows), "FELDERA_PROGRESS_TABLE", progressModes)
	if err != nil {
		return Result{}, err
	}
	single, err := b.catchUp(rounds, txns, "t", "pub", fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; COMMIT; END LOOP; END $$`, txns,
		strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", "generate_series(i, i)")), "FELDERA_PROGRESS_TABLE", progressModes)
	if err != nil {
		return Result{}, err
	}
	// j's load: two tables, a row each, per transaction.
	two, err := b.catchUp(rounds, 2*txns, "t,t2", "pub_two", fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; INSERT INTO t2 VALUES (i, i, 1); COMMIT; END LOOP; END $$`, txns,
		strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", "generate_series(i, i)")), "FELDERA_PROGRESS_TABLE", progressModes)
	if err != nil {
		return Result{}, err
	}
	ratio := median(bulk["on"]) / median(bulk["off"])
	singleRatio := median(single["on"]) / median(single["off"])
	twoRatio := median(two["on"]) / median(two["off"])
	fmt.Printf("    bulk on/off %.2f, single-row on/off %.2f, two-table on/off %.2f\n", ratio, singleRatio, twoRatio)
	extra := map[string]any{"single_rows_per_s_off": single["off"], "single_rows_per_s_on": single["on"], "single_ratio": singleRatio,
		"two_table_rows_per_s_off": two["off"], "two_table_rows_per_s_on": two["on"], "two_table_ratio": twoRatio}
	return Result{Workload: "l", What: fmt.Sprintf("catch-up of %d rows in 100 transactions, FELDERA_PROGRESS_TABLE=on against off; %d single-row and %d two-table transactions in Extra", rows, txns, txns),
		Unit: "rows/s", Reference: "FELDERA_PROGRESS_TABLE=off", Ref: bulk["off"], PGF: bulk["on"], RefMedian: median(bulk["off"]), PGFMedian: median(bulk["on"]), Ratio: ratio,
		Target: "≥ 0.9 × (bulk, single-row and two-table)", Pass: ratio >= 0.9 && singleRatio >= 0.9 && twoRatio >= 0.9, Extra: extra}, nil
}
