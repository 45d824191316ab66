package connector_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// f has a row filter (REPLICA IDENTITY FULL, so an update's old row shows
// whether it left the filter); c has a column list that leaves out secret.
const pubPG = `CREATE TABLE f (id int PRIMARY KEY, v int NOT NULL, note text);
ALTER TABLE f REPLICA IDENTITY FULL;
CREATE TABLE c (id int PRIMARY KEY, v int, secret text);
CREATE PUBLICATION pub FOR TABLE f WHERE (v > 10), c (id, v);`

const pubFeldera = `CREATE TABLE f (id INT NOT NULL PRIMARY KEY, v INT NOT NULL, note VARCHAR);
CREATE TABLE c (id INT NOT NULL PRIMARY KEY, v INT);`

const (
	filtered = "(SELECT * FROM f WHERE v > 10)"
	listed   = "(SELECT id, v FROM c)"
)

// Row filters and column lists: Feldera holds exactly the rows and columns
// the publication carries, after the snapshot, after the stream (updates
// moving rows into and out of the filter), and after a resnapshot with
// retraction, which must delete the rows that left the filter while no
// slot saw them. With the filter ignored (the unsafe variant, how the
// snapshot read before) Feldera keeps rows the stream never maintains.
func TestPublication_RowFilterAndColumnList(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	for _, unsafe := range []bool{false, true} {
		name := map[bool]string{false: "filtered", true: "unsafe_unfiltered"}[unsafe]
		t.Run(name, func(t *testing.T) {
			if unsafe {
				pgcluster.AnyVersion(t) // the check sees filtered rows: one server shows it
			}
			e := newEnv(t, pubPG, pubFeldera)
			e.exec("INSERT INTO f SELECT g, g % 20, 'n' || g FROM generate_series(1, 200) g")
			e.exec("INSERT INTO c SELECT g, g, 'hidden' FROM generate_series(1, 50) g")
			cfg := e.snapshotConfig("f,c")
			start := func() *running {
				c := e.newConnector(cfg, e.client)
				if unsafe {
					connector.IgnoreRowFilter(c)
				}
				return e.run(c)
			}
			r := start()
			e.waitSlot()
			e.waitLog("snapshot: complete", 30*time.Second)
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if unsafe {
				if d := e.diff(filtered, "f"); d == "" {
					t.Fatal("the unfiltered snapshot matched: this test cannot see a ghost row")
				}
				return
			}
			e.assertEqual(filtered, "f")
			e.assertEqual(listed, "c")
			if !strings.Contains(e.logs.String(), "publication has a row filter") {
				t.Fatal("the row filter was not logged")
			}

			// The stream: into the filter (pgoutput sends an INSERT), out
			// of it (a DELETE of the old row), within it, outside it.
			e.exec("UPDATE f SET v = 15 WHERE id IN (1, 2, 3)")   // 1, 2, 3: in
			e.exec("UPDATE f SET v = 0 WHERE id IN (11, 12, 13)") // out
			e.exec("UPDATE f SET note = 'x' WHERE id IN (14, 4)") // within, outside
			e.exec("INSERT INTO f VALUES (1001, 50, 'a'), (1002, 5, 'b')")
			e.exec("DELETE FROM f WHERE id IN (15, 5)")
			e.exec("UPDATE c SET v = -v, secret = 'changed' WHERE id <= 10")
			e.exec("INSERT INTO c VALUES (1000, 7, 's')")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual(filtered, "f")
			e.assertEqual(listed, "c")
			for _, row := range e.fel.Rows("c") {
				if strings.Contains(row.String(), "secret") || strings.Contains(row.String(), "hidden") {
					t.Fatalf("a column outside the publication's list reached Feldera: %s", row)
				}
			}

			// Rows leave the filter while no slot exists: only the
			// resnapshot's retraction can remove them from Feldera.
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			e.dropSlot(e.slot)
			e.exec("UPDATE f SET v = 1 WHERE id IN (16, 17, 18, 1001)")
			e.exec("UPDATE f SET v = 99 WHERE id IN (6, 7)")
			start()
			e.waitSlot()
			e.waitLog("resnapshot with retraction", 30*time.Second)
			e.eventuallyEqual(filtered, "f", 30*time.Second)
			e.assertEqual(listed, "c")
		})
	}
}

// Generated columns: the snapshot and the stream carry the same columns.
// Before PG 18 a generated column is never published, so Feldera's column
// stays NULL on both paths; on PG 18 with publish_generated_columns =
// stored the stream carries it, and the snapshot must read it too (COPY of
// a table with a generated column in its list fails before 18, so it is
// read through a query).
func TestPublication_GeneratedColumns(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	version := pgcluster.Shared(t).Version
	pub := "CREATE PUBLICATION pub FOR TABLE g;"
	if version >= 18 {
		pub = "CREATE PUBLICATION pub FOR TABLE g WITH (publish_generated_columns = stored);"
	}
	for _, path := range []string{"snapshot", "stream"} {
		t.Run(path, func(t *testing.T) {
			e := newEnv(t, `CREATE TABLE g (id int PRIMARY KEY, a int, doubled int GENERATED ALWAYS AS (a * 2) STORED);`+pub,
				`CREATE TABLE g (id INT NOT NULL PRIMARY KEY, a INT, doubled INT);`)
			cfg := e.config("g")
			if path == "snapshot" {
				e.exec("INSERT INTO g (id, a) SELECT g, g FROM generate_series(1, 20) g")
				cfg = e.snapshotConfig("g")
			}
			e.start(cfg)
			e.waitSlot()
			if path == "stream" {
				e.exec("INSERT INTO g (id, a) SELECT g, g FROM generate_series(1, 20) g")
				e.exec("UPDATE g SET a = 100 WHERE id = 3")
			} else {
				e.waitLog("snapshot: complete", 30*time.Second)
			}
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			want := "(SELECT id, a, doubled FROM g)"
			if version < 18 {
				want = "(SELECT id, a, NULL::int AS doubled FROM g)"
			}
			e.assertEqual(want, "g")
		})
	}
}

const partPG = `CREATE TABLE m (id int, region int, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1);
CREATE TABLE m2 (v text, region int NOT NULL, id int NOT NULL); -- another column order: attached, not created as a partition
ALTER TABLE m ATTACH PARTITION m2 FOR VALUES IN (2);
CREATE TABLE lone (id int, region int, v text, PRIMARY KEY (id, region));`

// The Feldera key is id alone, so a row moving between partitions (a
// delete in one leaf and an insert of the same id in the other) is only
// right if the two arrive in the stream's order.
const partFeldera = `CREATE TABLE m (id INT NOT NULL PRIMARY KEY, region INT NOT NULL, v VARCHAR);`

// Partitioned tables, both publication styles: the root published with
// publish_via_partition_root (read by COPY (SELECT …), since COPY of a
// partitioned table fails), and the leaves published under their own names
// mapped to one Feldera table (they share its route, so their changes keep
// the stream's order). Snapshot, then rows moving between partitions both
// ways, updates within one, inserts and deletes; then a resnapshot with
// retraction; then a TRUNCATE of the root. A TRUNCATE of only one of the
// leaves sharing the table is refused, naming it.
func TestPublication_PartitionedTable(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	for _, style := range []string{"via_root", "leaves"} {
		t.Run(style, func(t *testing.T) {
			pub, tables := "CREATE PUBLICATION pub FOR TABLE m WITH (publish_via_partition_root = true);", "m"
			if style == "leaves" {
				pub, tables = "CREATE PUBLICATION pub FOR TABLE m;", "m1:m,m2:m"
			}
			e := newEnv(t, partPG+pub, partFeldera)
			e.exec("INSERT INTO m SELECT g, 1 + g % 2, 'v' || g FROM generate_series(1, 300) g")
			cfg := e.snapshotConfig(tables)
			r := e.start(cfg)
			e.waitSlot()
			e.waitLog("snapshot: complete", 30*time.Second)
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("m", "m")
			// verify reads each leaf by its own column order.
			vs, err := verifyTables(t, cfg, e.client)
			if err != nil || len(vs) != 1 || !vs[0].Match || vs[0].PostgresRows != 300 {
				t.Fatalf("verify: %+v, %v", vs, err)
			}

			e.exec("UPDATE m SET region = 3 - region WHERE id % 7 = 0") // moves, both ways
			e.exec("UPDATE m SET v = 'moved back' , region = 3 - region WHERE id % 14 = 0")
			e.exec("UPDATE m SET v = 'same leaf' WHERE id % 5 = 0")
			e.exec("INSERT INTO m SELECT g, 1 + g % 2, 'new' FROM generate_series(301, 350) g")
			e.exec("DELETE FROM m WHERE id % 11 = 0")
			e.exec(`BEGIN; UPDATE m SET region = 2 WHERE id = 1; UPDATE m SET region = 1 WHERE id = 1; UPDATE m SET region = 2 WHERE id = 1; COMMIT`)
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("m", "m")

			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			e.dropSlot(e.slot)
			e.exec("DELETE FROM m WHERE id % 3 = 0")
			e.exec("UPDATE m SET region = 3 - region WHERE id % 13 = 0")
			r = e.start(cfg)
			e.waitSlot()
			e.waitLog("resnapshot with retraction", 30*time.Second)
			e.eventuallyEqual("m", "m", 30*time.Second)

			e.exec("TRUNCATE m")
			e.exec("INSERT INTO m VALUES (7, 1, 'after'), (8, 2, 'after')")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("m", "m")

			if style == "leaves" {
				e.exec("TRUNCATE m1")
				e.refusal(r, "a TRUNCATE of one of two leaves sharing a Feldera table", 30*time.Second, "TRUNCATE of public.m1", "share Feldera table m")
			}
		})
	}
	// Sources that are not partitions of one table may not share a
	// Feldera table: their rows would merge.
	for _, tables := range []string{"m1:m,lone:m", "m1:m,m2:m,lone:m"} {
		e := newEnv(t, partPG+"CREATE PUBLICATION pub FOR TABLE m, lone;", partFeldera)
		err := e.newConnector(e.config(tables), e.client).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "public.lone is not a partition") {
			t.Fatalf("%s: err = %v", tables, err)
		}
	}
}
