package crashtest_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

// rowInvariant checks, at every sample while a world's processes run,
// what the progress table promises: the slot's confirmed_flush_lsn is at
// or below the position of the source's committed progress row. The slot
// never passes what Feldera holds (delivery.Ledger.KeepRows), so a
// restart that reads the row never finds the slot ahead of it. A row
// cleared (0) or absent is not compared: the start clears it before it
// creates a slot, and a Feldera restart without fault tolerance loses it
// with everything else. The slot is read before the row, and the row
// only grows once written, so a sample never sees a violation that did
// not happen.
type rowInvariant struct {
	stop    context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples int
	broken  []string
}

// watchRow starts w's invariant check, once: at the first start of a
// process, when the world's slot and database are final.
func (w *world) watchRow() {
	if w.inv != nil || w.noRowInvariant {
		return
	}
	conn, err := pgx.Connect(context.Background(), w.dsn)
	if err != nil {
		w.t.Fatal(err)
	}
	var sysid, db string
	if err := conn.QueryRow(context.Background(), "SELECT system_identifier::text, current_database() FROM pg_control_system()").Scan(&sysid, &db); err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inv := &rowInvariant{stop: cancel, done: make(chan struct{})}
	w.inv = inv
	key, slot := fmt.Sprintf("%q", sysid+"/"+db+"/"+w.slot), w.slot
	go func() {
		defer close(inv.done)
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			inv.sample(ctx, conn, slot, func() (pglogrepl.LSN, bool) { return w.rowOf(key) })
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	w.t.Cleanup(func() {
		cancel()
		<-inv.done
		inv.mu.Lock()
		defer inv.mu.Unlock()
		if len(inv.broken) > 0 {
			w.t.Errorf("the slot passed the committed progress row at %d of %d samples, first: %v", len(inv.broken), inv.samples, inv.broken[:min(5, len(inv.broken))])
		}
	})
}

func (inv *rowInvariant) sample(ctx context.Context, conn *pgx.Conn, slot string, row func() (pglogrepl.LSN, bool)) {
	var s *string
	if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s); err != nil || s == nil {
		return // no slot yet, or a server gone (a failover)
	}
	confirmed, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		return
	}
	r, ok := row()
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.samples++
	if ok && r != 0 && confirmed > r {
		inv.broken = append(inv.broken, fmt.Sprintf("confirmed %s > row %s at %s", confirmed, r, time.Now().Format("15:04:05.000")))
	}
}

// rowOf is the committed progress row keyed key (JSON-quoted) in the
// double, and whether there is one.
func (w *world) rowOf(key string) (pglogrepl.LSN, bool) {
	for _, r := range w.fel.Rows(setup.ProgressTable) {
		if string(r["slot"]) == key {
			n, err := strconv.ParseUint(string(r["lsn"]), 10, 64)
			return pglogrepl.LSN(n), err == nil
		}
	}
	return 0, false
}

// The invariant check sees a slot past the committed progress row: the
// row set back by hand below the slot's confirmed position (what a
// ledger that acknowledged past the row would leave) is reported, and
// the row as pgfeldera left it is not.
func TestHarness_RowInvariantSeesTheSlotPastTheRow(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, progressDouble)
	p := w.start()
	w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
	w.exec("INSERT INTO users VALUES (1, 'a', 1)")
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	w.poll("the slot to pass the write", 60*time.Second, func() bool { return w.confirmed() >= target })
	p.stop(t)
	inv := w.inv
	inv.stop() // the samples below are the test's own
	<-inv.done
	conn, err := pgx.Connect(context.Background(), w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var key string
	for _, r := range w.fel.Rows(setup.ProgressTable) {
		key = string(r["slot"])
	}
	row := func() (pglogrepl.LSN, bool) { return w.rowOf(key) }
	inv.sample(context.Background(), conn, w.slot, row)
	inv.mu.Lock()
	clean := len(inv.broken)
	inv.mu.Unlock()
	if clean != 0 {
		t.Fatalf("the row pgfeldera left is reported as passed by the slot: %v", inv.broken)
	}
	if err := w.fel.Put(setup.ProgressTable, fmt.Sprintf(`{"slot": %s, "lsn": %d}`, key, uint64(w.confirmed())-1)); err != nil {
		t.Fatal(err)
	}
	inv.sample(context.Background(), conn, w.slot, row)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if len(inv.broken) != 1 {
		t.Fatalf("a row below the slot is not reported: %v", inv.broken)
	}
	inv.broken = nil // seen: not this test's failure
}
