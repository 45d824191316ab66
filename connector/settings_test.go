package connector_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// FELDERA_TRANSACTIONS=always wraps even flushes that need no transaction
// (single-record transactions of one table), end to end; auto sends the
// same workload without one.
func TestStream_TransactionsAlways(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, mode := range []string{connector.TxnAlways, connector.TxnAuto} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			cfg := e.config("users,public.items:catalog_items")
			cfg.Transactions = mode
			c := e.newConnector(cfg, e.client)
			r := e.run(c)
			e.waitSlot()
			for i := 1; i <= 50; i++ {
				e.exec(fmt.Sprintf("INSERT INTO users VALUES (%d, 'one', %d)", i, i))
			}
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			e.assertEqual("users", "users")
			n := c.Stats().Transactions.Load()
			switch {
			case mode == connector.TxnAlways && n == 0:
				t.Fatal("FELDERA_TRANSACTIONS=always started no Feldera transaction")
			case mode == connector.TxnAuto && n != 0:
				t.Fatalf("FELDERA_TRANSACTIONS=auto started %d Feldera transactions for single-record transactions of one table", n)
			}
			if open := e.fel.OpenTransaction(); open != 0 {
				t.Fatalf("Feldera transaction %d left open", open)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// PG_SLOT_FAILOVER=on below PostgreSQL 17, which has no failover slots:
// a configuration error naming the setting and the version, at once.
func TestFailover_OnRefusedBelow17(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	c := pgcluster.Shared(t)
	if c.Version >= 17 {
		t.Skipf("PostgreSQL %d has failover slots: crashtest's failover tests cover PG_SLOT_FAILOVER=on", c.Version)
	}
	e := newEnvOn(t, c, mixedPG, mixedFeldera, nil)
	cfg := e.config("users,public.items:catalog_items")
	cfg.SlotFailover = connector.FailoverOn
	r := e.start(cfg)
	err := e.refusal(r, "PG_SLOT_FAILOVER=on", 60*time.Second, "PG_SLOT_FAILOVER=on", fmt.Sprintf("PostgreSQL %d", c.Version))
	var fe *connector.FatalError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a fatal error", err)
	}
}

// Values Feldera cannot hold, read by the snapshot's COPY rather than
// decoded from the stream: with UNREPRESENTABLE_VALUES=null, timestamp
// ±infinity and TIME 24:00:00 arrive as NULL, and are counted.
func TestSnapshot_UnrepresentableAsNull(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	const pg = `
CREATE TABLE ev (id int PRIMARY KEY, ts timestamp, tm time);
INSERT INTO ev VALUES (1, 'infinity', '24:00:00'), (2, '-infinity', '12:00:00'), (3, '2024-02-29 10:00:00', '23:59:59');
CREATE PUBLICATION pub FOR TABLE ev;`
	const fel = `CREATE TABLE ev (id INT NOT NULL PRIMARY KEY, ts TIMESTAMP, tm TIME);`
	e := newEnv(t, pg, fel)
	cfg := e.snapshotConfig("ev")
	cfg.NullUnrepresentable = true
	c := e.newConnector(cfg, e.client)
	e.run(c)
	e.waitSlot()
	e.waitLog("snapshot: complete", 60*time.Second)
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	got := map[string][2]string{}
	for _, r := range e.fel.Rows("ev") {
		got[string(r["id"])] = [2]string{string(r["ts"]), string(r["tm"])}
	}
	if got["1"] != [2]string{"null", "null"} || got["2"][0] != "null" || got["2"][1] == "null" || got["3"][0] == "null" || got["3"][1] == "null" {
		t.Fatalf("rows (ts, tm) = %v: want row 1 both NULL, row 2 ts NULL, row 3 neither", got)
	}
	if n := c.Tables()[0].Nulled.Load(); n != 3 {
		t.Fatalf("nulled = %d, want 3", n)
	}
}
