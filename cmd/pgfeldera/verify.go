package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/verify"
)

// runVerify compares every mapped table in Postgres and Feldera. Exit 0
// when all match, 1 when one differs or cannot be read, 2 on a bad
// configuration.
func runVerify(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	asJSON, args := jsonFlag(args)
	maxDiffs := 5
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "--max-diffs=") || a == "--max-diffs":
			v := strings.TrimPrefix(a, "--max-diffs=")
			if a == "--max-diffs" && i+1 < len(args) {
				i++
				v = args[i]
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				fmt.Fprintf(stderr, "pgfeldera: configuration error: --max-diffs %q: want a number ≥ 0\n", v)
				return exitConfig
			}
			maxDiffs = n
		default:
			rest = append(rest, a)
		}
	}
	cfg, logger, client, code, done := configureClient("verify", rest, getenv, stderr)
	if done {
		return code
	}
	start := time.Now()
	sc, _, err := connector.Inspect(cfg.connectorConfig(logger))
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera verify:", err)
		return exitConfig
	}
	verdicts, err := verify.Tables(ctx, sc, client, maxDiffs)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera verify:", err)
		return exitFatal
	}
	output(stdout, asJSON, verdicts, func() {
		printVerdicts(stdout, verdicts)
		fmt.Fprintf(stdout, "verified %d tables in %.1fs\n", len(verdicts), time.Since(start).Seconds())
	})
	for _, v := range verdicts {
		if !v.Match {
			return exitFatal
		}
	}
	return exitOK
}

func printVerdicts(w io.Writer, verdicts []verify.Verdict) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table\tpostgres rows\tfeldera rows\tresult\n")
	for _, v := range verdicts {
		result := "match"
		switch {
		case v.Error != "":
			result = "ERROR: " + v.Error
		case !v.Match:
			result = "DIFFERENT"
		}
		fmt.Fprintf(tw, "%s → %s\t%d\t%d\t%s\n", v.Source, v.Dest, v.PostgresRows, v.FelderaRows, result)
		for _, d := range v.Differences {
			line := "  " + d.Key + "\t\t\t" + d.Kind
			if len(d.Columns) > 0 {
				line += ": " + strings.Join(d.Columns, ", ")
			}
			fmt.Fprintln(tw, line)
		}
		if len(v.NotCompared) > 0 {
			fmt.Fprintf(tw, "  not compared: %s\t\t\tno Postgres column feeds them\n", strings.Join(v.NotCompared, ", "))
		}
		if v.MoreDifferent {
			fmt.Fprintln(tw, "  …\t\t\tmore differences not shown")
		}
	}
	tw.Flush()
}
