package connector_test

import (
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

func TestStream_Truncate(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG+`
CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent(id));
ALTER PUBLICATION pub ADD TABLE parent, child;`, mixedFeldera+`
CREATE TABLE parent (id INT NOT NULL PRIMARY KEY);
CREATE TABLE child (id INT NOT NULL PRIMARY KEY, parent_id INT);`)
	cfg := e.config("users,public.items:catalog_items,parent,child")
	cfg.BatchMaxRows = 100 // the 500-row retraction flushes five times while its query streams
	e.start(cfg)
	e.waitSlot()
	e.exec("INSERT INTO users SELECT g, 'u', g FROM generate_series(1, 500) g")
	e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 50) g")
	e.exec("INSERT INTO parent SELECT g FROM generate_series(1, 20) g")
	e.exec("INSERT INTO child SELECT g, g FROM generate_series(1, 20) g")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)

	t.Run("MidStream", func(t *testing.T) {
		e.exec("TRUNCATE users")
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		e.assertEqual("users", "users")
		if n := len(e.fel.Rows("users")); n != 0 {
			t.Fatalf("%d rows left", n)
		}
	})
	t.Run("AfterInsertsInOneTransaction", func(t *testing.T) {
		e.exec("INSERT INTO users SELECT g, 'again', g FROM generate_series(1, 100) g")
		e.exec("BEGIN; INSERT INTO users SELECT g, 'discarded', g FROM generate_series(101, 200) g; TRUNCATE users; INSERT INTO users VALUES (7, 'after truncate', 7); COMMIT")
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		e.assertEqual("users", "users")
	})
	t.Run("MultiTableAndCascade", func(t *testing.T) {
		e.exec("TRUNCATE users, items")
		e.exec("TRUNCATE parent CASCADE")
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		e.assertEqual("users", "users")
		e.assertEqual("items", "catalog_items")
		e.assertEqual("parent", "parent")
		e.assertEqual("child", "child")
		if n := len(e.fel.Rows("child")); n != 0 {
			t.Fatalf("cascade left %d child rows", n)
		}
	})
}
