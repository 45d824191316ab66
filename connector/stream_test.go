package connector_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/connector"
)

const mixedPG = `
CREATE TABLE users (id bigint PRIMARY KEY, name text, score int);
CREATE TABLE items (sku int, region text, price numeric(10,2), PRIMARY KEY (sku, region));
CREATE TABLE unpublished (id serial PRIMARY KEY, payload text);
CREATE PUBLICATION pub FOR TABLE users, items;`

const mixedFeldera = `
CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);
CREATE TABLE catalog_items (sku INT NOT NULL, region VARCHAR NOT NULL, price DECIMAL(10,2), PRIMARY KEY (sku, region));`

func TestStream_MixedWorkload(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	cfg := e.config("users,public.items:catalog_items")
	cfg.BatchMaxRows = 4000
	e.start(cfg)
	e.waitSlot()
	e.exec("INSERT INTO users SELECT g, 'u' || g, g FROM generate_series(1, 100) g")
	e.exec("INSERT INTO items SELECT g, 'eu', g * 1.5 FROM generate_series(1, 50) g")
	e.exec("UPDATE users SET name = 'renamed' WHERE id <= 10")                          // non-key update
	e.exec("UPDATE users SET id = 1000 WHERE id = 11")                                  // key change
	e.exec("UPDATE items SET region = 'us' WHERE sku = 3")                              // composite key change
	e.exec("DELETE FROM users WHERE id BETWEEN 20 AND 29")                              // deletes
	e.exec("DELETE FROM users WHERE id = 30; INSERT INTO users VALUES (30, 'back', 0)") // delete and reinsert
	e.exec("BEGIN; INSERT INTO users VALUES (2000, 'tx', 1); UPDATE items SET price = 0 WHERE sku = 1; DELETE FROM items WHERE sku = 2; COMMIT")
	e.exec("INSERT INTO users SELECT g, 'big', g FROM generate_series(100000, 124999) g") // 25,000 rows in one transaction
	target := e.currentLSN()
	e.waitConfirmed(target, 60*time.Second)
	e.assertEqual("users", "users")
	e.assertEqual("items", "catalog_items")
	if n := len(e.fel.Rows("users")); n != 100-10+1+25000 {
		t.Fatalf("users has %d rows", n)
	}
	// The 25,000-row transaction went out in pieces of at most
	// BATCH_MAX_ROWS (the memory bound).
	e.assertBatchesBounded(cfg.BatchMaxRows)
	if len(e.fel.Requests()) < 25000/cfg.BatchMaxRows {
		t.Fatalf("%d requests for a 25,000-row transaction with BATCH_MAX_ROWS=%d", len(e.fel.Requests()), cfg.BatchMaxRows)
	}
}

func TestStream_IdleUnpublishedWritesAreAcked(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	e.start(e.config("users,public.items:catalog_items"))
	e.waitSlot()
	e.exec("INSERT INTO unpublished (payload) SELECT repeat('x', 100) FROM generate_series(1, 10000)")
	target := e.currentLSN()
	// status interval is 10 s with the default wal_sender_timeout of 60 s
	e.waitConfirmed(target, 30*time.Second)
	if n := len(e.fel.Requests()); n != 0 {
		t.Fatalf("%d ingress requests for unpublished writes", n)
	}
}

func TestStream_RefusesUnmappedTable(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG+"\nCREATE TABLE other (id int primary key); ALTER PUBLICATION pub ADD TABLE other;", mixedFeldera)
	r := e.start(e.config("users,public.items:catalog_items"))
	e.waitSlot()
	e.exec("INSERT INTO other VALUES (1)")
	e.refusal(r, "a change to an unmapped table", 30*time.Second, "public.other")
}

// A keyless Feldera table is a multiset: an UPDATE must retract the old row
// by its whole value. With REPLICA IDENTITY DEFAULT the stream carries no
// old row, so startup refuses it, naming both tables; with FULL, updates,
// deletes and duplicate rows end in an exact multiset match, and so does a
// resnapshot (which retracts every row first).
func TestStream_KeylessDestination(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	const pg = `
CREATE TABLE log (msg text, n int);
CREATE PUBLICATION pub FOR TABLE log;`
	const fel = `CREATE TABLE events (msg VARCHAR, n INT) WITH ('materialized' = 'true');`
	t.Run("default_identity_refused", func(t *testing.T) {
		e := newEnv(t, pg, fel)
		cfg := e.config("log:events")
		cfg.RequirePrimaryKey = false
		err := e.newConnector(cfg, e.client).Run(context.Background())
		var fe *connector.FatalError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "public.log") || !strings.Contains(err.Error(), "events") || !strings.Contains(err.Error(), "REPLICA IDENTITY DEFAULT") {
			t.Fatalf("want a refusal naming public.log, events and the identity; got %v", err)
		}
	})
	t.Run("full_identity_exact", func(t *testing.T) {
		e := newEnv(t, pg, fel)
		e.exec("ALTER TABLE log REPLICA IDENTITY FULL")
		e.exec("INSERT INTO log VALUES ('pre', 1), ('pre', 1), ('pre', 2)")
		cfg := e.snapshotConfig("log:events")
		cfg.RequirePrimaryKey = false
		r := e.start(cfg)
		e.waitSlot()
		e.exec("INSERT INTO log VALUES ('a', 1), ('a', 1), ('b', 2), ('c', 3)")
		e.exec("UPDATE log SET n = 10 WHERE msg = 'a'")                                      // two identical rows change
		e.exec("DELETE FROM log WHERE msg = 'b'")                                            // one delete
		e.exec("UPDATE log SET msg = 'pre2' WHERE n = 2")                                    // a pre-existing row
		e.exec("DELETE FROM log WHERE ctid = (SELECT min(ctid) FROM log WHERE msg = 'pre')") // one of two copies
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		e.assertEqual("log", "events")
		if e.fel.MissedDeletes() != 0 {
			t.Fatalf("%d deletes of rows Feldera did not hold", e.fel.MissedDeletes())
		}
		// Resnapshot: the slot is dropped while stopped; the restart
		// retracts every row and copies the table again.
		r.stop(t)
		e.dropSlot(e.slot)
		e.exec("INSERT INTO log VALUES ('while down', 7), ('while down', 7)")
		e.exec("DELETE FROM log WHERE msg = 'c'")
		e.start(cfg)
		e.eventuallyEqual("log", "events", 30*time.Second)
		e.waitLog("resnapshot", 10*time.Second)
		if e.fel.MissedDeletes() != 0 {
			t.Fatalf("%d deletes of rows Feldera did not hold", e.fel.MissedDeletes())
		}
	})
}

// BATCH_LINGER_MS counts from the oldest row of the filling batch: a
// writer that never pauses still gets its rows flushed every linger, not
// only once it stops (a linger restarted by each row would never fire).
func TestStream_LingerFromOldestRow(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	cfg := e.config("users,public.items:catalog_items")
	cfg.BatchLinger = 300 * time.Millisecond
	e.start(cfg)
	e.waitSlot()
	before := len(e.fel.Requests())
	w := e.startWriter("users", 0) // a row every few milliseconds
	// While the writer is still writing, at least three flushes land.
	e.poll("three flushes while rows keep arriving", 30*time.Second, func() bool { return len(e.fel.Requests())-before >= 3 })
	written := w.halt()
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	e.assertEqual("users", "users")
	reqs := e.fel.Requests()[before:]
	rows := 0
	for _, r := range reqs {
		rows += r.Inserts
	}
	if rows != int(written) || len(reqs) >= int(written)/2 {
		t.Fatalf("%d rows in %d requests for %d written: the linger should batch them", rows, len(reqs), written)
	}
	t.Logf("%d rows in %d requests", rows, len(reqs))
}

// BATCH_MAX_BYTES bounds a request in bytes whatever the row width: a
// transaction of wide rows goes out in requests of at most the bound plus
// one row, and lands exactly; a row wider than the bound seals the batch
// it lands in.
func TestStream_BatchMaxBytes(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	cfg := e.config("users,public.items:catalog_items")
	cfg.BatchMaxBytes = 1 << 20
	e.start(cfg)
	e.waitSlot()
	before := len(e.fel.Requests())
	// 200 rows of about 100 KB in one transaction (20 MB), then one row
	// of 3 MB, wider than the bound.
	e.exec("INSERT INTO users SELECT g, repeat(md5(g::text), 3200), g FROM generate_series(1, 200) g")
	e.exec("INSERT INTO users VALUES (1000, repeat('w', 3 << 20), 0)")
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	e.assertEqual("users", "users")
	const row = 103 << 10 // a ~100 KB row's line, with its envelope
	reqs := e.fel.Requests()[before:]
	for i, r := range reqs[:len(reqs)-1] {
		if r.Bytes > cfg.BatchMaxBytes+row {
			t.Fatalf("request %d (%d lines) carried %d bytes, more than BATCH_MAX_BYTES=%d plus one row", i, r.Lines, r.Bytes, cfg.BatchMaxBytes)
		}
	}
	if len(reqs) < 15 {
		t.Fatalf("20 MB in %d requests: the byte bound did not split the transaction", len(reqs))
	}
	// The wide row may share its request with what was filling before it,
	// at most BATCH_MAX_BYTES of it.
	if last := reqs[len(reqs)-1]; last.Bytes < 3<<20 || last.Bytes > cfg.BatchMaxBytes+(3<<20)+1024 {
		t.Fatalf("the wide row's request: %d lines, %d bytes", last.Lines, last.Bytes)
	}
}
