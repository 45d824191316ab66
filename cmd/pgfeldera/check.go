package main

import (
	"context"
	"fmt"
	"io"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/setup"
)

// runCheck looks at every prerequisite of a run at once and prints each
// problem with its fix. Exit 0 only when a run would start; 2 when a
// prerequisite does not hold (a configuration error, like a run's
// refusal); 1 when the look itself failed.
func runCheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	asJSON, args := jsonFlag(args)
	cfg, logger, client, code, done := configureClient("check", args, getenv, stderr)
	if done {
		return code
	}
	sc, opts, err := connector.Inspect(cfg.connectorConfig(logger))
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera check:", err)
		return exitConfig
	}
	report, err := setup.Check(ctx, sc, opts, client)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera check:", err)
		return exitFatal
	}
	if report.Problems == nil {
		report.Problems = setup.Problems{}
	}
	output(stdout, asJSON, struct {
		OK bool `json:"ok"`
		*setup.CheckReport
	}{report.OK(), report}, func() { printCheck(stdout, cfg, report) })
	if !report.OK() {
		return exitConfig
	}
	return exitOK
}

func printCheck(w io.Writer, cfg *Config, r *setup.CheckReport) {
	for i, p := range r.Problems {
		fmt.Fprintf(w, "%d. %s: %s\n", i+1, p.Subject, p.What)
		if p.Fix != "" {
			fmt.Fprintf(w, "   fix: %s\n", p.Fix)
		}
	}
	if !r.OK() {
		noun := "problems"
		if len(r.Problems) == 1 {
			noun = "problem"
		}
		fmt.Fprintf(w, "%d %s: pgfeldera run would not start\n", len(r.Problems), noun)
		return
	}
	fmt.Fprintf(w, "ok: %d tables ready; postgres %s, feldera pipeline %s (fault tolerance %s, ack gate %s)\n",
		r.Tables, redactDSN(cfg.DSN), cfg.Pipeline, r.Model, r.Gate)
	if r.Replays != "" {
		fmt.Fprintf(w, "replays: %s\n", r.Replays)
	}
}
