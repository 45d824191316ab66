package connector_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// pgbench's schema as pgbench -i creates it (keys added after the load).
const pgbenchPG = `CREATE TABLE pgbench_branches (bid int not null, bbalance int, filler char(88));
CREATE TABLE pgbench_tellers (tid int not null, bid int, tbalance int, filler char(84));
CREATE TABLE pgbench_accounts (aid int not null, bid int, abalance int, filler char(84));
CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
ALTER TABLE pgbench_branches ADD PRIMARY KEY (bid);
ALTER TABLE pgbench_tellers ADD PRIMARY KEY (tid);
ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid);
CREATE PUBLICATION pub FOR TABLE pgbench_branches, pgbench_tellers, pgbench_accounts, pgbench_history;`

// generated runs pgfeldera ddl's function on the new database and checks
// the double's DDL parser takes its output unchanged.
func generated(t *testing.T, tables string, contains ...string) func(dsn string) string {
	return func(dsn string) string {
		ts, err := catalog.ParseTables(tables)
		if err != nil {
			t.Fatal(err)
		}
		ddl, notes, err := catalog.DDL(context.Background(), dsn, "pub", ts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pgfeldera ddl:\n%s", ddl)
		for _, n := range notes {
			t.Logf("note: %s", n)
		}
		if _, err := felderatest.ParseDDL(ddl); err != nil {
			t.Fatalf("the double's DDL parser refuses the output: %v\n%s", err, ddl)
		}
		for _, c := range contains {
			if !strings.Contains(ddl, c) {
				t.Errorf("ddl lacks %q:\n%s", c, ddl)
			}
		}
		return ddl
	}
}

// pgfeldera ddl over the type matrix: every column gets a type startup
// accepts unchanged, and snapshot and stream deliver the values the
// matrix test expects (the generated types are the decoder's first
// choices; the hand-written matrix uses some others).
func TestDDL_TypeMatrixRoundTrip(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnvGen(t, pgcluster.Shared(t), richPG+`
CREATE TABLE "Quoted" ("Id" int PRIMARY KEY, "select" text NOT NULL, "MixedCase" numeric(5,-2), big numeric(40,2), ts timestamptz, d date, f float8, u uuid, b bytea);
CREATE TABLE keyless (a int, b text);
ALTER PUBLICATION pub ADD TABLE "Quoted", keyless;`, generated(t, `rich,"Quoted",keyless`,
		"m VARCHAR", "ms VARCHAR ARRAY", "p DECIMAL(10, 2)", "pi INTEGER", "a2 INTEGER ARRAY", "n DECIMAL(38, 10)", "nc DECIMAL(8, 3)",
		"jb VARIANT", "id INTEGER NOT NULL", "PRIMARY KEY (id)", `CREATE TABLE "Quoted"`, `"Id" INTEGER NOT NULL`, `"select" VARCHAR NOT NULL`,
		`"MixedCase" DECIMAL(7, 0)`, "-- big: not mapped", `PRIMARY KEY ("Id")`, "WITH ('materialized' = 'true')"), nil)
	e.exec(`INSERT INTO rich VALUES (1, 'happy', '{sad,ok}', 12.5, 7, 'A@B.com', 'MiXeD',
	  '192.168.1.5/24', '10.1.0.0/16', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', '<a b="1">x</a>', B'1010', B'101',
	  '1 year 2 months 3 days 04:05:06.5', int4range(1, 5, '[]'), '[2024-01-01 00:00:00+00,2024-01-02 00:00:00+00)',
	  '[1.5,2.5]', '{[1,3),[5,7)}', '{1,2}', '{a,NULL}', 1.5, 12345.678, '{"k": [1, "x"]}')`)
	e.exec(`INSERT INTO "Quoted" VALUES (1, 'x', 1234500, 1.5, '2024-01-01 12:00:00+00', '2024-02-29', 1.5, 'c32d8b45-92fe-44f6-8b61-42c2107dfe87', '\xdead')`)
	cfg := e.snapshotConfig(`rich,"Quoted"`)
	e.start(cfg)
	e.waitSlot()
	e.waitLog("snapshot: complete", 30*time.Second)
	e.exec(`INSERT INTO rich (id, m, a2, n, nc) VALUES (2, 'ok', '{3}', 99.25, 1.5)`)
	e.exec(`INSERT INTO "Quoted" VALUES (2, 'y', -700, NULL, '2024-01-01 12:00:00+00', '0001-01-01', -0.5, NULL, '\x00')`)
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	for _, r := range e.fel.Requests() {
		if r.Errors != 0 || r.Status != 200 {
			t.Fatalf("the double rejected a request: %+v", r)
		}
	}
	want := map[string]string{
		"id": "1", "m": `"happy"`, "ms": `["sad","ok"]`, "p": "12.50", "pi": "7", "e": `"A@B.com"`, "ci": `"MiXeD"`,
		"ip": `"192.168.1.5/24"`, "cn": `"10.1.0.0/16"`, "mac": `"08:00:2b:01:02:03"`, "mac8": `"08:00:2b:01:02:03:04:05"`,
		"x": `"\u003ca b=\"1\"\u003ex\u003c/a\u003e"`, "bt": `"1010"`, "vb": `"101"`, "iv": `"P1Y2M3DT4H5M6.5S"`, "r": `"[1,6)"`,
		"tr": `"[\"2024-01-01 00:00:00+00\",\"2024-01-02 00:00:00+00\")"`, "fr": `"[1.5,2.5]"`, "mr": `"{[1,3),[5,7)}"`,
		"a2": "[1,2]", "a3": `["a",null]`, "n": "1.5000000000", "nc": "12345.678", "jb": `{"k":[1,"x"]}`,
	}
	rows := e.fel.Rows("rich")
	if len(rows) != 2 {
		t.Fatalf("%d rows in rich", len(rows))
	}
	for _, r := range rows {
		if string(r["id"]) != "1" {
			if string(r["a2"]) != "[3]" || string(r["n"]) != "99.2500000000" || string(r["nc"]) != "1.500" {
				t.Errorf("row 2 = %v", r)
			}
			continue
		}
		if len(r) != len(want) {
			t.Errorf("row 1 has %d fields, want %d", len(r), len(want))
		}
		for k, v := range want {
			if string(r[k]) != v {
				t.Errorf("%s = %s, want %s", k, r[k], v)
			}
		}
	}
	quoted := map[string]bool{
		`{"Id":1,"MixedCase":1234500,"b":[222,173],"d":"2024-02-29","f":1.5,"select":"x","ts":"2024-01-01T12:00:00","u":"c32d8b45-92fe-44f6-8b61-42c2107dfe87"}`: true,
		`{"Id":2,"MixedCase":-700,"b":[0],"d":"0001-01-01","f":-0.5,"select":"y","ts":"2024-01-01T12:00:00","u":null}`:                                           true,
	}
	for _, r := range e.fel.Rows(`"Quoted"`) {
		if b, _ := json.Marshal(r); !quoted[string(b)] {
			t.Errorf(`"Quoted" holds %s`, b)
		}
	}
	if n := len(e.fel.Rows(`"Quoted"`)); n != 2 {
		t.Errorf(`"Quoted" holds %d rows`, n)
	}
}

// pgbench's schema: the keyed tables take the generated DDL unchanged;
// the keyless history table is declared materialized.
func TestDDL_PgbenchRoundTrip(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnvGen(t, pgcluster.Shared(t), pgbenchPG, generated(t, "pgbench_branches,pgbench_tellers,pgbench_accounts,pgbench_history",
		"aid INTEGER NOT NULL", "filler VARCHAR", "PRIMARY KEY (aid)", "mtime TIMESTAMP", "CREATE TABLE pgbench_history (", "WITH ('materialized' = 'true')"), nil)
	e.exec("INSERT INTO pgbench_branches SELECT g, 0, '' FROM generate_series(1, 2) g")
	e.exec("INSERT INTO pgbench_tellers SELECT g, 1 + g % 2, 0 FROM generate_series(1, 20) g")
	e.exec("INSERT INTO pgbench_accounts SELECT g, 1 + g % 2, 0, '' FROM generate_series(1, 1000) g")
	cfg := e.snapshotConfig("pgbench_branches,pgbench_tellers,pgbench_accounts,pgbench_history")
	cfg.RequirePrimaryKey = false
	e.exec("ALTER TABLE pgbench_history REPLICA IDENTITY FULL") // the note says so: a keyless table retracts by whole row
	e.start(cfg)
	e.waitSlot()
	e.waitLog("snapshot: complete", 30*time.Second)
	e.exec("UPDATE pgbench_accounts SET abalance = abalance + 5 WHERE aid % 3 = 0")
	e.exec("INSERT INTO pgbench_history VALUES (1, 1, 3, 5, '2024-01-01 00:00:00', NULL)")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	for _, tab := range []string{"pgbench_branches", "pgbench_tellers", "pgbench_accounts", "pgbench_history"} {
		e.assertEqual(tab, tab)
	}
}
