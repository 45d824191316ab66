package connector_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// Against a pipeline whose steps take 250 ms, batches are POSTed one at a
// time in commit order while their completions overlap: several are in
// flight at once (the double's queue shows it), every key's versions land
// in commit order (the double checks score only grows per key), and
// Feldera ends equal to Postgres. With BATCH_MAX_IN_FLIGHT=1 the same
// load never has two requests queued: the check can see the difference.
func TestStream_InFlightUnderSlowCompletion(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, inFlight := range []int{1, 8} {
		t.Run(fmt.Sprintf("in_flight=%d", inFlight), func(t *testing.T) {
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
				fc.OrderColumn = "score"
			})
			e.fel.SetCompletionDelay(250 * time.Millisecond)
			cfg := e.config("users,public.items:catalog_items")
			cfg.BatchMaxRows = 100
			cfg.BatchMaxInFlight = inFlight
			// Batches inside a Feldera transaction complete only at its
			// commit, so BATCH_MAX_IN_FLIGHT does not bound them (see
			// stream.canPost): the bound is measured outside one.
			cfg.Transactions = connector.TxnOff
			e.start(cfg)
			e.waitSlot()
			e.exec("INSERT INTO users SELECT g, 'u' || g, 0 FROM generate_series(1, 300) g")
			for round := 0; round < 6; round++ {
				// Each transaction spans several batches and both tables.
				e.exec(fmt.Sprintf(`BEGIN;
					UPDATE users SET score = score + 1, name = 'r%d';
					INSERT INTO items SELECT g, 'r%d', g FROM generate_series(1, 20) g;
					DELETE FROM users WHERE id = %d;
					COMMIT`, round, round, 300-round))
			}
			e.waitConfirmed(e.currentLSN(), 90*time.Second)
			e.assertEqual("users", "users")
			e.assertEqual("items", "catalog_items")
			if v := e.fel.OrderViolations(); v != 0 {
				t.Fatalf("%d rows reached Feldera out of commit order", v)
			}
			// A batch is one request per table it holds rows of: two here.
			const tables = 2
			peak := e.fel.PeakQueued()
			switch {
			case inFlight == 1 && peak > tables:
				t.Fatalf("BATCH_MAX_IN_FLIGHT=1, yet %d requests were queued at once", peak)
			case inFlight > 1 && peak <= tables:
				t.Fatalf("BATCH_MAX_IN_FLIGHT=%d, yet never more than one batch (%d requests) in flight", inFlight, peak)
			case peak > inFlight*tables:
				t.Fatalf("%d requests queued at once, more than %d batches in flight allow", peak, inFlight)
			}
			t.Logf("peak requests queued at once: %d; requests %d", peak, len(e.fel.Requests()))
		})
	}
}

// However many batches may be in flight, together they stay within what
// Feldera buffers per ingress endpoint (100,000 records): past it Feldera
// stops reading a POST, and one blocked 30 s gets a 503 that must be fenced.
// Ten 20,000-row batches against a pipeline that takes no step: the
// connector posts until five batches' worth is queued, then waits, and no
// POST ever finds the buffer full.
func TestStream_InFlightWithinFelderaBuffer(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, nil)
	cfg := e.config("users")
	cfg.BatchMaxRows = 20_000
	cfg.BatchMaxInFlight = 64
	// Each 20,000-row transaction would go out inside a Feldera
	// transaction of its own (auto), one at a time: the bound is measured
	// outside them.
	cfg.Transactions = connector.TxnOff
	// No completion comes while the steps are held, which lasts as long
	// as the connector takes to post five batches (over 30 s under -race
	// on a loaded machine): a completion timeout then would end the
	// session, and its replay would find the first session's records
	// still queued in Feldera (what an endpoint read stays queued), which
	// is backpressure this test does not measure.
	cfg.CompletionTimeout = 10 * time.Minute
	e.start(cfg)
	e.waitSlot()
	// No step runs, so nothing queued is drained: what is queued is
	// exactly what the connector has in flight, however fast it decodes.
	e.fel.HoldCompletion(true)
	e.exec(`DO $$ BEGIN FOR i IN 0..9 LOOP INSERT INTO users SELECT g, 'u', 1 FROM generate_series(i * 20000 + 1, (i + 1) * 20000) g; COMMIT; END LOOP; END $$`)
	e.poll("more than four batches queued", 60*time.Second, func() bool { return e.fel.PeakQueuedRecords() > 80_000 })
	// A connector without the bound would post its next batch as soon as
	// it has decoded it: give it twice the time the batches so far took
	// each, then let Feldera step.
	reqs := e.fel.Requests()
	each := reqs[len(reqs)-1].Time.Sub(reqs[0].Time) / time.Duration(len(reqs))
	time.Sleep(max(2*time.Second, 2*each))
	e.fel.HoldCompletion(false)
	e.waitConfirmed(e.currentLSN(), 90*time.Second)
	e.assertEqual("users", "users")
	if strings.Contains(e.logs.String(), "session: ended") {
		t.Fatalf("the session ended while Feldera held its steps: the measure needs one session\n%s", tail(e.logs.String(), 4000))
	}
	if n := e.fel.PushedBack(); n > 0 {
		t.Fatalf("%d POSTs met Feldera's backpressure (more than 100,000 records in flight)\n%s", n, tail(e.logs.String(), 4000))
	}
}
