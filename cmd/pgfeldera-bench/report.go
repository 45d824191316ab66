package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// cpuExtra reports the CPU each process used: with the walsender as the
// ceiling, it is what pgfeldera takes from Postgres on a shared machine.
func cpuExtra(cpu map[string][]float64, rows int) map[string]any {
	m := map[string]any{}
	for k, v := range cpu {
		m["cpu_seconds_"+k] = v
		m["cpu_us_per_row_"+k] = median(v) * 1e6 / float64(rows)
	}
	return m
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func ratioResult(id, what, unit, refName string, ref, pgf []float64, min float64) Result {
	r := Result{Workload: id, What: what, Unit: unit, Reference: refName, Ref: ref, PGF: pgf,
		RefMedian: median(ref), PGFMedian: median(pgf)}
	if r.RefMedian > 0 {
		r.Ratio = r.PGFMedian / r.RefMedian
	}
	if min > 0 {
		r.Target = fmt.Sprintf("≥ %.1f × %s", min, refName)
		r.Pass = r.Ratio >= min
	}
	return r
}

func summary(r Result) string {
	if r.Ratio > 0 {
		return fmt.Sprintf("%.0f vs %.0f %s, ratio %.2f", r.PGFMedian, r.RefMedian, r.Unit, r.Ratio)
	}
	return fmt.Sprintf("%.1f %s", r.PGFMedian, r.Unit)
}

func printTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nworkload\treference (median)\tpgfeldera (median)\tratio\ttarget\tresult")
	for _, r := range results {
		ref, ratio := "-", "-"
		if r.Reference != "" {
			ref = fmt.Sprintf("%.1f %s (%s)", r.RefMedian, r.Unit, r.Reference)
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		verdict := "FAIL"
		if r.Pass {
			verdict = "ok"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%.1f %s\t%s\t%s\t%s\n", r.Workload, short(r.What), ref, r.PGFMedian, r.Unit, ratio, r.Target, verdict)
	}
	tw.Flush()
}

func short(s string) string {
	if i := strings.IndexAny(s, ":("); i > 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}
