package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/verify"
)

// verify says "match" after a snapshot of a mix of types, and names the
// keys of differences planted in the double: a changed value, a missing
// row, an extra row, and a copy too many in a keyless table.
func TestVerify(t *testing.T) {
	pgcluster.AnyVersion(t)
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	ctx := context.Background()
	if err := c.Exec(ctx, db, `
		CREATE TABLE items (id bigint PRIMARY KEY, name text, amount numeric(12,2), ts timestamptz, d date,
			u uuid, flag boolean, f float8, j jsonb, b bytea, tags text[]);
		INSERT INTO items SELECT g, 'item ' || g, g * 1.5, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 second 1 millisecond',
			'2024-01-01'::date + g, md5(g::text)::uuid, g % 2 = 0, g / 3.0, jsonb_build_object('g', g, 'a', array[g]),
			decode(md5(g::text), 'hex'), array['x', g::text] FROM generate_series(1, 300) g;
		INSERT INTO items (id) VALUES (1000);
		CREATE TABLE log (msg text, n int);
		ALTER TABLE log REPLICA IDENTITY FULL;
		INSERT INTO log VALUES ('a', 1), ('a', 1), ('b', 2);
		CREATE PUBLICATION pub FOR TABLE items, log;`); err != nil {
		t.Fatal(err)
	}
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(`
		CREATE TABLE items (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, amount DECIMAL(12,2), ts TIMESTAMP, d DATE,
			u UUID, flag BOOLEAN, f DOUBLE, j VARIANT, b VARBINARY, tags VARCHAR ARRAY, origin VARCHAR NOT NULL DEFAULT 'pg');
		CREATE TABLE log (msg VARCHAR, n INT) WITH ('materialized' = 'true');`)})
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	vars := map[string]string{"PG_DSN": dsn, "PG_PUBLICATION": "pub", "PG_SLOT": "verify_slot", "TABLES": "items,log",
		"FELDERA_URL": fel.URL, "FELDERA_PIPELINE": "p", "STATE_FILE": filepath.Join(t.TempDir(), "state.json"),
		"FELDERA_REQUIRE_PRIMARY_KEY": "false"}

	client, _ := feldera.New(feldera.Config{URL: fel.URL, Pipeline: "p"})
	tables, _ := catalog.ParseTables("items,log")
	conn, err := connector.New(connector.Config{DSN: dsn, Publication: "pub", Slot: "verify_slot", Tables: tables,
		StateFile: vars["STATE_FILE"], Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, client)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- conn.Run(rctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for (len(fel.Rows("items")) < 301 || len(fel.Rows("log")) < 3) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	verify := func(args ...string) (int, []verify.Verdict, string) {
		var out, errb bytes.Buffer
		code := run(ctx, func() {}, append([]string{"verify", "--json"}, args...), env(vars), &out, &errb)
		var v []verify.Verdict
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("verify output: %v\n%s\n%s", err, out.String(), errb.String())
		}
		return code, v, errb.String()
	}
	code, v, msg := verify()
	if code != 0 || len(v) != 2 || !v[0].Match || !v[1].Match || v[0].PostgresRows != 301 || v[1].FelderaRows != 3 ||
		fmt.Sprint(v[0].NotCompared) != "[origin]" {
		t.Fatalf("after a snapshot: code=%d %+v %s", code, v, msg)
	}

	// The keyless table's digest, computed here from hand-written
	// canonical values rather than by either side's encoder: per row the
	// SHA-256 of its length-prefixed values, first 16 bytes summed as two
	// 64-bit lanes.
	var lanes [2]uint64
	for _, row := range [][]string{{`"a"`, "1"}, {`"a"`, "1"}, {`"b"`, "2"}} {
		var buf []byte
		for _, v := range row {
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
		h := sha256.Sum256(buf)
		lanes[0] += binary.BigEndian.Uint64(h[:8])
		lanes[1] += binary.BigEndian.Uint64(h[8:16])
	}
	want := fmt.Sprintf("%016x%016x", lanes[0], lanes[1])
	if v[1].PostgresHash != want || v[1].FelderaHash != want {
		t.Fatalf("log digest: postgres %s, feldera %s, computed independently %s", v[1].PostgresHash, v[1].FelderaHash, want)
	}

	// Plant differences in Feldera's state.
	if err := fel.Put("items", `{"id":7,"name":"tampered"}`); err != nil {
		t.Fatal(err)
	}
	if err := fel.Delete("items", `{"id":250}`); err != nil {
		t.Fatal(err)
	}
	if err := fel.Put("items", `{"id":5000,"name":"ghost"}`); err != nil {
		t.Fatal(err)
	}
	if err := fel.Put("log", `{"msg":"b","n":2}`); err != nil {
		t.Fatal(err)
	}
	code, v, msg = verify()
	if code != 1 || v[0].Match || v[1].Match {
		t.Fatalf("planted differences not seen: code=%d %+v %s", code, v, msg)
	}
	got := ""
	for _, tv := range v {
		for _, d := range tv.Differences {
			got += tv.Source + " " + d.Key + " " + d.Kind + " " + strings.Join(d.Columns, ",") + "\n"
		}
	}
	for _, want := range []string{
		"public.items id=7 values differ name,amount,ts,d,u,flag,f,j,b,tags",
		"public.items id=250 missing in Feldera",
		"public.items id=5000 not in Postgres",
		`public.log msg="b" n=2 not in Postgres (Postgres has 1, Feldera 2)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("differences lack %q:\n%s", want, got)
		}
	}
	// The text form names the table and a key; --max-diffs bounds the list.
	var out bytes.Buffer
	run(ctx, func() {}, []string{"verify", "--max-diffs", "1"}, env(vars), &out, io.Discard)
	t.Logf("pgfeldera verify --max-diffs 1:\n%s", out.String())
	if !strings.Contains(out.String(), "public.items → items") || !strings.Contains(out.String(), "DIFFERENT") ||
		!strings.Contains(out.String(), "more differences not shown") {
		t.Fatalf("text verify:\n%s", out.String())
	}
}
