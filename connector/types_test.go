package connector_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/verify"

	"github.com/pgfeldera/pgfeldera/connector"
)

// The type matrix, through both paths that share the decoder: rows
// committed after the start arrive by the stream, rows present before it
// by the initial snapshot's COPY. Both must produce the same hand-written
// values.
func TestStream_TypeMatrix(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	for _, path := range []string{"stream", "snapshot"} {
		t.Run(path, func(t *testing.T) { typeMatrix(t, path) })
	}
}

func typeMatrix(t *testing.T, path string) {
	e := newEnv(t, `
CREATE TABLE typed (
  id int PRIMARY KEY, b bool, i2 int2, i8 int8, o oid, f4 float4, f8 float8, f8nan float8, n numeric(20,6), nnan numeric,
  t text, vc varchar(10), bp char(4), nm name, c "char", u uuid, d date, tm time, ttz timetz, ts timestamp, tstz timestamptz,
  j json, jb jsonb, jtext jsonb, by bytea, ai int4[], at text[], an numeric[]);
CREATE PUBLICATION pub FOR TABLE typed;`, `
CREATE TABLE typed (
  id INT NOT NULL PRIMARY KEY, b BOOLEAN, i2 SMALLINT, i8 BIGINT, o BIGINT, f4 REAL, f8 DOUBLE, f8nan DOUBLE, n DECIMAL(20,6), nnan DECIMAL(20,6),
  t VARCHAR, vc VARCHAR, bp CHAR(4), nm VARCHAR, c VARCHAR, u UUID, d DATE, tm TIME, ttz TIME, ts TIMESTAMP, tstz TIMESTAMP_TZ,
  j VARIANT, jb VARIANT, jtext VARCHAR, by VARBINARY, ai INT ARRAY, at VARCHAR ARRAY, an DECIMAL(10,2) ARRAY);`)
	insert := func() {
		// The session TimeZone differs from UTC on purpose: the connector pins its own.
		e.exec("SET TimeZone = 'America/New_York'")
		e.exec(`INSERT INTO typed VALUES (1, true, -32768, 9223372036854775807, 4294967295, 1.5, -2.25e-300, 'NaN', 12345678901234.123456, 'NaN',
	  E'quote" backslash\\ newline\n tab\t é 😀', 'short', 'ab', 'nm', 'c', 'c32d330f-5757-4ada-bcf6-1fac2d54e37f', '2024-02-29',
	  '23:59:59.999999', '01:30:00+05:30', '2024-01-01 12:00:00.5', '2024-01-01 07:00:00-05',
	  '{"b": 1, "a": [true, null]}', '{"b": 1, "a": [true, null]}', '{"x": 1}', '\xdead00ff', '{1,NULL,3}', '{"a b",NULL,"c\"d"}', '{1.5,NULL}')`)
		e.exec(`INSERT INTO typed (id) VALUES (2)`)
	}
	rows := e.deliver(path, "typed", 2, insert)
	want := map[string]string{
		"b": "true", "i2": "-32768", "i8": "9223372036854775807", "o": "4294967295", "f4": "1.5", "f8": "-2.25e-300", "f8nan": "null",
		"n": "12345678901234.123456", "nnan": "null", "t": `"quote\" backslash\\ newline\n tab\t é 😀"`, "vc": `"short"`, "bp": `"ab  "`,
		"nm": `"nm"`, "c": `"c"`, "u": `"c32d330f-5757-4ada-bcf6-1fac2d54e37f"`, "d": `"2024-02-29"`, "tm": `"23:59:59.999999"`,
		"ttz": `"20:00:00"`, "ts": `"2024-01-01T12:00:00.5"`, "tstz": `"2024-01-01T12:00:00"`,
		"j": `{"a":[true,null],"b":1}`, "jb": `{"a":[true,null],"b":1}`, "jtext": `"{\"x\": 1}"`, "by": "[222,173,0,255]",
		"ai": "[1,null,3]", "at": `["a b",null,"c\"d"]`, "an": "[1.50,null]",
	}
	for k, v := range want {
		if got := string(rows[0][k]); got != v {
			t.Errorf("%s = %s, want %s", k, got, v)
		}
	}
	for k, v := range rows[1] {
		if k != "id" && string(v) != "null" {
			t.Errorf("row 2: %s = %s, want null", k, v)
		}
	}
	verifyMatches(t, e, e.config("typed"))
}

// verifyMatches runs pgfeldera verify's comparison, which reads Feldera
// through /query as Feldera prints it, and fails unless every table
// matches.
func verifyMatches(t *testing.T, e *env, cfg connector.Config) {
	t.Helper()
	verdicts, err := verifyTables(t, cfg, e.client)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range verdicts {
		if !v.Match || v.Error != "" {
			t.Errorf("verify %s: %+v", v.Source, v)
		}
	}
}

// A keyless destination of every type: a TRUNCATE retracts each row by
// its whole value, read back through /query (where BINARY is hex, VARIANT
// a string of JSON, DECIMAL a bare number, TIMESTAMP with a T) and sent
// as ingress takes it. Every delete must match, or rows stay.
func TestStream_KeylessRetractionOfEveryType(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnv(t, `
CREATE TABLE typed (
  id int, b bool, f4 float4, f8 float8, n numeric(20,6), t text, bp char(4), u uuid, d date, tm time,
  ts timestamp, tstz timestamptz, j json, jb jsonb, by bytea, ai int4[], an numeric[]);
ALTER TABLE typed REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE typed;`, `
CREATE TABLE typed (
  id INT, b BOOLEAN, f4 REAL, f8 DOUBLE, n DECIMAL(20,6), t VARCHAR, bp CHAR(4), u UUID, d DATE, tm TIME,
  ts TIMESTAMP, tstz TIMESTAMP_TZ, j VARIANT, jb VARIANT, by VARBINARY, ai INT ARRAY, an DECIMAL(10,2) ARRAY) WITH ('materialized' = 'true');`)
	cfg := e.config("typed")
	cfg.RequirePrimaryKey = false
	e.start(cfg)
	e.waitSlot()
	e.exec(`INSERT INTO typed VALUES (1, true, 1.5, 0.1, 12345678901234.5, E'q" \\ é', 'ab', 'c32d330f-5757-4ada-bcf6-1fac2d54e37f', '2024-02-29',
	  '23:59:59.999999', '2024-01-01 12:00:00.5', '2024-01-01 07:00:00.123-05', '{"b": 1, "a": [true, null]}', '"text"', '\xdead00ff', '{1,NULL,3}', '{1.5,NULL}')`)
	e.exec(`INSERT INTO typed VALUES (1, true, 1.5, 0.1, 12345678901234.5, E'q" \\ é', 'ab', 'c32d330f-5757-4ada-bcf6-1fac2d54e37f', '2024-02-29',
	  '23:59:59.999999', '2024-01-01 12:00:00.5', '2024-01-01 07:00:00.123-05', '{"b": 1, "a": [true, null]}', '"text"', '\xdead00ff', '{1,NULL,3}', '{1.5,NULL}')`)
	e.exec(`INSERT INTO typed (id, f8, j) VALUES (2, 1e300, '12.50')`)
	e.exec(`INSERT INTO typed (id) VALUES (3)`)
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	verifyMatches(t, e, cfg)
	if n := e.fel.Len("typed"); n != 4 {
		t.Fatalf("%d rows before the TRUNCATE, want 4", n)
	}
	e.exec("TRUNCATE typed")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	if n, missed := e.fel.Len("typed"), e.fel.MissedDeletes(); n != 0 || missed != 0 {
		t.Fatalf("after the TRUNCATE: %d rows left, %d deletes matched nothing", n, missed)
	}
}

func TestStream_Toast(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnv(t, `CREATE TABLE docs (id int PRIMARY KEY, title text, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE PUBLICATION pub FOR TABLE docs;`, `CREATE TABLE docs (id INT NOT NULL PRIMARY KEY, title VARCHAR, body VARCHAR);`)
	buf := make([]byte, 4000)
	rand.Read(buf)
	big := hex.EncodeToString(buf) // 8,000 incompressible characters
	e.exec("INSERT INTO docs VALUES (1, 'a', $1)", big)

	t.Run("FullFillsTheHole", func(t *testing.T) {
		e.exec("ALTER TABLE docs REPLICA IDENTITY FULL")
		r := e.start(e.config("docs"))
		e.waitSlot()
		e.exec("INSERT INTO docs VALUES (2, 'b', $1)", big)
		e.exec("UPDATE docs SET title = 'b2' WHERE id = 2")
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		rows := e.fel.Rows("docs")
		if len(rows) != 1 || string(rows[0]["title"]) != `"b2"` || string(rows[0]["body"]) != `"`+big+`"` {
			t.Fatalf("rows = %v", rows)
		}
		r.stop(t)
	})
	t.Run("DefaultRefuses", func(t *testing.T) {
		e.exec("ALTER TABLE docs REPLICA IDENTITY DEFAULT")
		r := e.start(e.config("docs"))
		e.waitSlot()
		e.exec("UPDATE docs SET title = 'a2' WHERE id = 1")
		e.refusal(r, "an unchanged TOASTed value", 30*time.Second, "public.docs column body", "TOAST")
	})
}

func TestStream_AlterTableAddColumn(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnv(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text);
CREATE PUBLICATION pub FOR TABLE users;`, `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);`)
	e.start(e.config("users"))
	e.waitSlot()
	e.exec("INSERT INTO users SELECT g, 'u' FROM generate_series(1, 100) g")
	e.exec("BEGIN; INSERT INTO users VALUES (101, 'before'); ALTER TABLE users ADD COLUMN score int; INSERT INTO users VALUES (102, 'after', 7); COMMIT")
	e.exec("UPDATE users SET score = 1 WHERE id <= 5")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	e.assertEqual("users", "users")
}

// A mapped column renamed, dropped or retyped while streaming: the
// connector stops with a refusal naming the column, and Feldera keeps the
// rows as they were before the change. It never sends the later rows with
// the column NULLed: an update after the change would otherwise blank the
// column of a row Feldera already holds, and the comparison would see it.
func TestStream_MappedColumnChangesMidStream(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	cases := []struct{ name, alter, column, before string }{
		{"rename", "ALTER TABLE users RENAME COLUMN name TO full_name", "name", "(SELECT id, full_name AS name, score FROM users WHERE id <= 100)"},
		{"drop", "ALTER TABLE users DROP COLUMN name", "name", ""},
		{"retype", "ALTER TABLE users ALTER COLUMN score TYPE text", "score", "(SELECT id, name, score::int FROM users WHERE id <= 100)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text, score int);
CREATE PUBLICATION pub FOR TABLE users;`, `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);`)
			r := e.start(e.config("users"))
			e.waitSlot()
			e.exec("INSERT INTO users SELECT g, 'u' || g, g FROM generate_series(1, 100) g")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("users", "users")
			e.exec(c.alter)
			e.exec("INSERT INTO users (id) VALUES (101)")
			e.exec("UPDATE users SET id = id WHERE id <= 10")
			e.refusal(r, c.name+" of a mapped column", 30*time.Second, "public.users", c.column)
			if c.before != "" {
				e.assertEqual(c.before, "users")
				return
			}
			e.assertEqual("(SELECT id, 'u' || id AS name, score FROM users WHERE id <= 100)", "users")
		})
	}
}

// verifyTables runs pgfeldera verify's comparison under cfg.
func verifyTables(t *testing.T, cfg connector.Config, client *feldera.Client) ([]verify.Verdict, error) {
	t.Helper()
	sc, _, err := connector.Inspect(cfg)
	if err != nil {
		return nil, err
	}
	return verify.Tables(context.Background(), sc, client, 5)
}
