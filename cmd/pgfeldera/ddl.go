package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/setup"
)

// runDDL prints Feldera CREATE TABLE statements for TABLES, read from the
// Postgres catalog with the decoder's own type mapping (catalog.DDL).
// It needs PG_DSN, PG_PUBLICATION and TABLES; the Feldera settings are
// not used, so FELDERA_URL and FELDERA_PIPELINE may be unset. Columns the
// connector cannot map are printed as comments and listed on stderr; the
// exit code is then still 0, since the printed schema is accepted. The
// progress table follows (FELDERA_PROGRESS_TABLE).
func runDDL(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	env := func(k string) string {
		v := getenv(k)
		if v == "" && (k == "FELDERA_URL" || k == "FELDERA_PIPELINE") {
			return map[string]string{"FELDERA_URL": "http://127.0.0.1:1", "FELDERA_PIPELINE": "unused"}[k]
		}
		return v
	}
	cfg, err := parseConfig("ddl", args, env, stderr)
	if code, done := configResult(err, stderr); done {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ddl, notes, err := catalog.DDL(ctx, cfg.DSN, cfg.Publication, cfg.Tables)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera ddl:", err)
		return exitFatal
	}
	fmt.Fprint(stdout, ddl)
	fmt.Fprint(stdout, "\n-- pgfeldera's position, committed with the rows: with FELDERA_PROGRESS_TABLE=auto or on, a restart skips what Feldera holds\n"+setup.ProgressDDL)
	for _, n := range notes {
		fmt.Fprintln(stderr, "pgfeldera ddl: note:", n)
	}
	return exitOK
}
