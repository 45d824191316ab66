package connector

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// The partitions of a partitioned table mapped through its root
// (publish_via_partition_root). ATTACH PARTITION brings rows the WAL never
// carried as changes of the root, and DETACH PARTITION takes rows away
// without a delete: either way Feldera and Postgres differ with nothing in
// the stream to say so. So the leaves whose rows were read are recorded
// (state.Table.Partitions); a start that finds others reads the table
// again, incrementally (retraction first, which deletes a detached
// partition's rows), and a session that sees them change while it streams
// (the pipeline watcher looks every partitionCheckEvery ticks) ends, so
// the next start does that.

// partitionCheckEvery is how many watcher ticks pass between two reads of
// the partitions (about 10 s).
const partitionCheckEvery = 5

// partitionWatch reads the leaves of the session's partitioned tables
// while it streams, on a connection of its own.
type partitionWatch struct {
	c    *Connector
	p    *setup.Plan
	conn *pgx.Conn
}

// check returns an error that ends the session when a partitioned table's
// leaves differ from the ones the session began with.
func (w *partitionWatch) check(ctx context.Context) error {
	if w.c.test.ignoreShape || !slices.ContainsFunc(w.p.Leaves, func(l []string) bool { return l != nil }) {
		return nil
	}
	if w.conn == nil || w.conn.IsClosed() {
		conn, err := replconn.Connect(ctx, w.c.cfg.DSN)
		if err != nil {
			w.c.logger.Warn("partitions: cannot connect to read the partitions; trying again at the next check", "err", err)
			return nil
		}
		w.conn = conn
	}
	for i, known := range w.p.Leaves {
		if known == nil {
			continue
		}
		leaves, err := catalog.ReadLeafIdentities(ctx, w.conn, w.p.Targets[i].Source())
		if err != nil {
			w.c.logger.Warn("partitions: read failed; trying again at the next check", "err", err)
			w.close()
			return nil
		}
		now := make([]string, len(leaves))
		for j, l := range leaves {
			now[j] = l.Name
		}
		if attached, detached := setup.PartitionsMoved(known, now); len(attached)+len(detached) > 0 {
			return fmt.Errorf("the partitions of %s changed while streaming (%s): the session restarts to read the table again", w.p.Targets[i].Qualified(), setup.MovedText(attached, detached))
		}
	}
	return nil
}

func (w *partitionWatch) close() {
	if w.conn != nil {
		w.conn.Close(context.Background())
		w.conn = nil
	}
}

// reconcile checks what the restarted Feldera and the catalog hold
// against the state (setup.Reconcile), under this connector's rules, and
// publishes the gate a journal gap moved.
func (c *Connector) reconcile(p *setup.Plan, st *state.State) (string, error) {
	before := p.Gate
	why, err := setup.Reconcile(p, st, setup.Rules{StateFile: c.cfg.StateFile, Logger: c.logger,
		TrustRestores: c.test.trustRestores, IgnoreShape: c.test.ignoreShape, GateForced: c.test.forceGate != nil})
	if p.Gate != before {
		c.gate.Store(int32(p.Gate))
	}
	return why, err
}
