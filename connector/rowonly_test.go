package connector

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgoutputtest"
	"github.com/pgfeldera/pgfeldera/setup"
)

// With the progress row the slot never passes the row Feldera holds, even
// where no row of data moves it: a source transaction with nothing mapped
// (writes to unpublished tables) and a quiet keepalive are acknowledged
// only with a Feldera transaction that writes the row alone. So a row
// below the slot can only mean Feldera lost what was acknowledged. The
// unsafe variant (noKeepRows) acknowledges them at once, and the slot
// passes the row.
func TestScripted_ProgressRowCarriesPositionsWithoutRows(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "rows", true: "noKeepRows"}[unsafe], func(t *testing.T) {
			fc := withPipeline(felderatest.Config{})
			fel, err := felderatest.NewServer(fc)
			if err != nil {
				t.Fatal(err)
			}
			defer fel.Close()
			o := withProgress(fel)
			plan := o.plan
			o.plan = func(p *setup.Plan, c *Connector) {
				plan(p, c)
				p.WALTimeout = time.Second // status updates, and rows alone, every 500 ms
				c.test.NoKeepRows = unsafe
			}
			sc := runScriptedWith(t, fc, nil, o)
			sc.transaction(0x2000, 0x2010, "1")
			sc.src.waitFlushed(t, 0x2010)
			sc.transaction(0x3000, 0x3010) // nothing mapped
			sc.src.waitFlushed(t, 0x3010)
			row := progressOf(fel.Rows("pgfeldera_progress"))
			if unsafe {
				if row >= 0x3010 {
					t.Fatalf("without the rule the row is %s at a slot of 0/3010: the test cannot see the slot pass it", row)
				}
				return
			}
			if row < 0x3010 {
				t.Fatalf("the slot confirmed 0/3010 while Feldera's progress row is %s", row)
			}
			sc.src.in <- pgoutputtest.Keepalive(0x5000, false)
			sc.src.waitFlushed(t, 0x5000)
			if row := progressOf(fel.Rows("pgfeldera_progress")); row < 0x5000 {
				t.Fatalf("the slot confirmed 0/5000 at a quiet keepalive while Feldera's progress row is %s", row)
			}
			// One row alone per status interval at most, however often
			// keepalives move the WAL end: the bound is taken from the
			// time the keepalives took, so a slow machine only loosens it.
			before, start := fel.TransactionsCommitted(), time.Now()
			at := pglogrepl.LSN(0x5000)
			for range 50 {
				at += 0x100
				sc.src.in <- pgoutputtest.Keepalive(at, false)
				time.Sleep(20 * time.Millisecond)
			}
			elapsed := time.Since(start)
			for give := time.Now().Add(30 * time.Second); sc.src.flushed() < at; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(give) {
					t.Fatalf("the slot is at %s 30 s after the last keepalive at %s", sc.src.flushed(), at)
				}
				sc.src.in <- pgoutputtest.Keepalive(at, false)
			}
			bound := int(elapsed/(500*time.Millisecond)) + 2
			if n := fel.TransactionsCommitted() - before; n > bound {
				t.Fatalf("%d Feldera transactions for 50 keepalives in %s, want at most %d (one per 500 ms status interval)", n, elapsed.Round(time.Millisecond), bound)
			}
		})
	}
}
