package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// pgfeldera ddl needs only the Postgres settings; it prints what the
// double's DDL parser reads, notes refused columns on stderr, and exits 1
// naming a missing publication, 2 on a missing PG_DSN.
func TestDDLCommand(t *testing.T) {
	pgcluster.EveryVersion(t)
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if err := c.Exec(context.Background(), db, `
		CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, cash money, amount numeric(12,2));
		CREATE PUBLICATION pub FOR TABLE items;`); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"PG_DSN": dsn, "PG_PUBLICATION": "pub", "TABLES": "items"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), func() {}, []string{"ddl"}, func(k string) string { return vars[k] }, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"CREATE TABLE items (", "id BIGINT NOT NULL", "name VARCHAR NOT NULL", "amount DECIMAL(12, 2)", "PRIMARY KEY (id)", "-- cash: not mapped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errb.String(), "column cash (money, OID 790)") || !strings.Contains(errb.String(), "lc_monetary") {
		t.Errorf("stderr = %s", errb.String())
	}
	rels, err := felderatest.ParseDDL(out.String())
	if err != nil || len(rels) != 2 || len(rels[0].Fields) != 3 || rels[1].Name != "pgfeldera_progress" {
		t.Fatalf("parsed %+v, %v", rels, err)
	}

	vars["PG_PUBLICATION"] = "nopub"
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), func() {}, []string{"ddl"}, func(k string) string { return vars[k] }, &out, &errb); code != exitFatal || !strings.Contains(errb.String(), `publication "nopub" does not exist`) {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	delete(vars, "PG_DSN")
	if code := run(context.Background(), func() {}, []string{"ddl"}, func(k string) string { return vars[k] }, &out, &errb); code != exitConfig {
		t.Fatalf("exit %d without PG_DSN", code)
	}
}
