package connector_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/connector"
)

// A char(3) primary key through every retraction that compares Feldera's
// keys with Postgres: a resnapshot after the slot was dropped, one after
// a Feldera restart without fault tolerance, and a resnapshot request
// while streaming. The keys were cast to the bare type name, character,
// which is character(1): every key looked absent, every row was deleted.
// Now no key Postgres holds is ever deleted, and Feldera ends exact.
func TestRetraction_CharKeys(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnv(t, `
CREATE TABLE codes (code char(3) PRIMARY KEY, v int);
INSERT INTO codes SELECT lpad(g::text, 3, '0'), g FROM generate_series(1, 999) g;
CREATE PUBLICATION pub FOR TABLE codes;`, `CREATE TABLE codes (code CHAR(3) NOT NULL PRIMARY KEY, v INT);`)
	cfg := e.snapshotConfig("codes")
	snapshots := 0
	noneDeleted := func(t *testing.T, what string) {
		t.Helper()
		if what != "resnapshot request" {
			snapshots++
			e.poll(what+" to complete", 60*time.Second, func() bool {
				return strings.Count(e.logs.String(), "snapshot: complete;") >= snapshots
			})
		}
		e.waitConfirmed(e.currentLSN(), 60*time.Second)
		e.assertEqual("codes", "codes")
		for _, r := range e.fel.Requests() {
			if len(r.DeleteKeys) > 0 {
				t.Fatalf("%s: %d keys Postgres holds were deleted (first %s)", what, len(r.DeleteKeys), r.DeleteKeys[0])
			}
		}
	}
	r := e.start(cfg)
	e.waitSlot()
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	noneDeleted(t, "first snapshot")

	r.stop(t)
	e.dropSlot(e.slot)
	r = e.start(cfg)
	e.waitLog("resnapshot with retraction", 30*time.Second)
	e.waitSlot()
	noneDeleted(t, "resnapshot after the slot was dropped")

	e.fel.Restart() // no fault tolerance: Feldera lost the rows
	e.waitLog("its state is lost", 30*time.Second)
	e.exec("UPDATE codes SET v = v + 1 WHERE code = '001'") // a change past the resnapshot's slot
	noneDeleted(t, "resnapshot after a Feldera restart")
	r.stop(t)

	inc := cfg
	inc.SnapshotMode = connector.SnapshotIncremental
	e.start(inc)
	e.waitSlot()
	e.exec("DELETE FROM codes WHERE v = 999")
	if err := e.fel.Put("codes", `{"code": "zzz", "v": 0}`); err != nil { // a ghost the retraction must delete
		t.Fatal(err)
	}
	e.requestResnapshot("r1", "public.codes")
	e.waitRequest(inc.StateFile, "r1", 60*time.Second)
	e.eventuallyEqual("codes", "codes", 60*time.Second)
	for _, req := range e.fel.Requests() {
		for _, k := range req.DeleteKeys {
			if k != `"zzz"` && k != `"999"` {
				t.Fatalf("resnapshot request: key %s, which Postgres holds, was deleted", k)
			}
		}
	}
}
