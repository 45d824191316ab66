package connector_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/decode"
)

const richPG = `CREATE EXTENSION IF NOT EXISTS citext;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN price AS numeric(10,2) CHECK (VALUE >= 0);
CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
CREATE DOMAIN email AS citext;
CREATE TYPE floatrange AS RANGE (subtype = float8);
CREATE TABLE rich (id int PRIMARY KEY, m mood, ms mood[], p price, pi posint, e email, ci citext,
  ip inet, cn cidr, mac macaddr, mac8 macaddr8, x xml, bt bit(4), vb varbit, iv interval,
  r int4range, tr tstzrange, fr floatrange, mr int4multirange, a2 int[], a3 text[], n numeric, nc numeric(8,3), jb jsonb);
CREATE PUBLICATION pub FOR TABLE rich;`

const richFeldera = `CREATE TABLE rich (id INT NOT NULL PRIMARY KEY, m VARCHAR, ms VARCHAR ARRAY, p DECIMAL(10,2), pi INT, e VARCHAR, ci VARCHAR,
  ip VARCHAR, cn VARCHAR, mac VARCHAR, mac8 VARCHAR, x VARCHAR, bt VARCHAR, vb VARCHAR, iv VARCHAR,
  r VARCHAR, tr VARCHAR, fr VARCHAR, mr VARCHAR, a2 INT ARRAY ARRAY, a3 VARIANT, n DECIMAL(12,3), nc DECIMAL(10,3), jb VARIANT);`

// The schema matrix: enums, domains (over numeric, int4 and citext),
// citext, network types, xml, bit strings, interval, ranges (built-in and
// user-defined) and multiranges, multi-dimensional arrays, unconstrained
// numeric into DECIMAL, jsonb into VARIANT. Snapshot and stream must write
// the same values, and the double must take every one.
func TestStream_SchemaMatrix(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	for _, path := range []string{"stream", "snapshot"} {
		t.Run(path, func(t *testing.T) {
			e := newEnv(t, richPG, richFeldera)
			insert := func() {
				e.exec("SET TimeZone = 'America/New_York'")
				e.exec("SET IntervalStyle = 'sql_standard'") // the connector pins its own
				e.exec(`INSERT INTO rich VALUES (1, 'happy', '{sad,ok}', 12.5, 7, 'A@B.com', 'MiXeD',
				  '192.168.1.5/24', '10.1.0.0/16', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', '<a b="1">x</a>', B'1010', B'101',
				  '1 year 2 months 3 days 04:05:06.5', int4range(1, 5, '[]'), '[2024-01-01 00:00:00+00,2024-01-02 00:00:00+00)',
				  '[1.5,2.5]', '{[1,3),[5,7)}', '{{1,2},{3,4}}', '{{a,b},{c,NULL}}', 1.5, 12345.678, '{"k": [1, "x"]}')`)
				e.exec(`INSERT INTO rich (id) VALUES (2)`)
			}
			rows := e.deliver(path, "rich", 2, insert)
			want := map[string]string{
				"m": `"happy"`, "ms": `["sad","ok"]`, "p": "12.50", "pi": "7", "e": `"A@B.com"`, "ci": `"MiXeD"`,
				"ip": `"192.168.1.5/24"`, "cn": `"10.1.0.0/16"`, "mac": `"08:00:2b:01:02:03"`, "mac8": `"08:00:2b:01:02:03:04:05"`,
				"x": `"\u003ca b=\"1\"\u003ex\u003c/a\u003e"` /* the double prints JSON as encoding/json does */, "bt": `"1010"`, "vb": `"101"`, "iv": `"P1Y2M3DT4H5M6.5S"`, "r": `"[1,6)"`,
				"tr": `"[\"2024-01-01 00:00:00+00\",\"2024-01-02 00:00:00+00\")"`, "fr": `"[1.5,2.5]"`, "mr": `"{[1,3),[5,7)}"`,
				"a2": "[[1,2],[3,4]]", "a3": `[["a","b"],["c",null]]`, "n": "1.500", "nc": "12345.678", "jb": `{"k":[1,"x"]}`,
			}
			got := map[int]map[string]string{}
			for _, r := range rows {
				m := map[string]string{}
				for k, v := range r {
					m[k] = string(v)
				}
				got[len(got)] = m
			}
			row1, row2 := got[0], got[1]
			if row1["id"] != "1" {
				row1, row2 = row2, row1
			}
			for k, v := range want {
				if row1[k] != v {
					t.Errorf("%s = %s, want %s", k, row1[k], v)
				}
			}
			for k, v := range row2 {
				if k != "id" && v != "null" {
					t.Errorf("row 2: %s = %s, want null", k, v)
				}
			}
		})
	}
}

// Each refused pair stops the connector at startup with a refusal naming
// the table, the column, the Postgres type (name and OID) and the Feldera
// type.
func TestStream_SchemaRefusals(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	cases := []struct {
		name, pgType, pgPre, felType string
		want                         []string
	}{
		{"enumIntoInt", "mood", "CREATE TYPE mood AS ENUM ('sad', 'ok');", "INT", []string{"mood", "INTEGER", "label"}},
		{"money", "money", "", "DECIMAL(12,2)", []string{"money", "OID 790", "DECIMAL", "lc_monetary"}},
		{"intervalIntoBigint", "interval", "", "BIGINT", []string{"interval", "OID 1186", "BIGINT", "ISO 8601"}},
		{"composite", "pt", "CREATE TYPE pt AS (x int, y int);", "VARCHAR", []string{"pt", "composite", "VARCHAR"}},
		{"numericScale", "numeric(12,4)", "", "DECIMAL(12,2)", []string{"numeric(12,4)", "OID 1700", "DECIMAL(12,2)", "truncate"}},
		{"domainOverMoney", "cash", "CREATE DOMAIN cash AS money;", "VARCHAR", []string{"domain cash", "money", "lc_monetary"}},
		{"rangeIntoInt", "int4range", "", "INT", []string{"int4range", "OID 3904", "INTEGER"}},
		{"inetIntoBinary", "inet", "", "VARBINARY", []string{"inet", "OID 869", "VARBINARY"}},
		{"arrayIntoScalar", "int[]", "", "INT", []string{"int4[]", "OID 1007", "INTEGER"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.pgPre+`CREATE TABLE feel (id int PRIMARY KEY, v `+c.pgType+`);
CREATE PUBLICATION pub FOR TABLE feel;`, `CREATE TABLE feel (id INT NOT NULL PRIMARY KEY, v `+c.felType+`);`)
			conn, err := connector.New(e.config("feel"), e.client)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = conn.Run(ctx)
			var re *decode.RefusalError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "public.feel column v") || !strings.Contains(err.Error(), "OID") {
				t.Fatalf("err = %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not mention %q", err, w)
				}
			}
		})
	}
}

// Values Feldera cannot hold, at run time. By default each stops the
// connector naming the table, the column and the row's key, and nothing
// past it is acknowledged. With UNREPRESENTABLE_VALUES=null an infinite
// date is delivered as NULL and counted. An unconstrained numeric with
// more fraction digits than the DECIMAL is refused: Feldera would
// truncate it silently, as the double shows when the value is sent
// unchecked.
func TestStream_ValuesFelderaCannotHold(t *testing.T) {
	pgcluster.EveryVersion(t)
	// Not parallel: it checks that the slot did not move at all, and on a
	// shared cluster an idle session acknowledges other tests' WAL.
	const pg = `CREATE TABLE ev (id int PRIMARY KEY, d date, n numeric);
CREATE PUBLICATION pub FOR TABLE ev;`
	const fel = `CREATE TABLE ev (id INT NOT NULL PRIMARY KEY, d DATE, n DECIMAL(10,2));`
	refused := func(t *testing.T, insert string, want ...string) {
		e := newEnv(t, pg, fel)
		r := e.start(e.config("ev"))
		e.waitSlot()
		e.exec("INSERT INTO ev VALUES (1, '2024-01-01', 1.5)")
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		before := e.confirmed()
		e.exec(insert)
		e.refusal(r, insert, 30*time.Second, append(want, "public.ev")...)
		if e.confirmed() != before || len(e.fel.Rows("ev")) != 1 {
			t.Fatalf("the refused transaction was acknowledged or delivered: %d rows", len(e.fel.Rows("ev")))
		}
	}
	t.Run("InfinityRefused", func(t *testing.T) {
		refused(t, "INSERT INTO ev VALUES (42, 'infinity', 1)", "column d", "row id=42", "infinity", "UNREPRESENTABLE_VALUES")
	})
	t.Run("YearAbove9999Refused", func(t *testing.T) {
		refused(t, "INSERT INTO ev VALUES (43, '12024-01-01', 1)", "column d", "row id=43")
	})
	t.Run("NumericDigitsRefused", func(t *testing.T) {
		refused(t, "INSERT INTO ev VALUES (44, NULL, 1.23456)", "column n", "row id=44", "DECIMAL(10,2)")
		// The unsafe variant: sent unchecked, Feldera keeps 1.23.
		e := newEnv(t, pg, fel)
		tok, err := e.client.Ingress(context.Background(), "ev", []byte(`{"insert":{"id":44,"n":"1.23456"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.client.WaitComplete(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
		if rows := e.fel.Rows("ev"); len(rows) != 1 || string(rows[0]["n"]) != "1.23" {
			t.Fatalf("rows = %v", rows)
		}
	})
	t.Run("InfinityAsNull", func(t *testing.T) {
		e := newEnv(t, pg, fel)
		cfg := e.config("ev")
		cfg.NullUnrepresentable = true
		c := e.newConnector(cfg, e.client)
		e.run(c)
		e.waitSlot()
		e.exec("INSERT INTO ev VALUES (1, 'infinity', 1), (2, '-infinity', 2), (3, '2024-02-29', 3)")
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		got := map[string]string{}
		for _, r := range e.fel.Rows("ev") {
			got[string(r["id"])] = string(r["d"])
		}
		if got["1"] != "null" || got["2"] != "null" || got["3"] != `"2024-02-29"` {
			t.Fatalf("rows = %v", got)
		}
		if n := c.Tables()[0].Nulled.Load(); n != 2 {
			t.Fatalf("nulled = %d, want 2", n)
		}
		e.waitLog("delivered as NULL", 5*time.Second)
	})
}
