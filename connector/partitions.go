package connector

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// partitionsMoved lists the leaves now has that known lacks (attached)
// and the ones known has that now lacks (detached).
func partitionsMoved(known, now []string) (attached, detached []string) {
	for _, l := range now {
		if !slices.Contains(known, l) {
			attached = append(attached, l)
		}
	}
	for _, l := range known {
		if !slices.Contains(now, l) {
			detached = append(detached, l)
		}
	}
	return attached, detached
}

// movedText says what moved, for a log or an error.
func movedText(attached, detached []string) string {
	var parts []string
	if len(attached) > 0 {
		parts = append(parts, "attached "+strings.Join(attached, ", "))
	}
	if len(detached) > 0 {
		parts = append(parts, "detached "+strings.Join(detached, ", "))
	}
	return strings.Join(parts, "; ")
}

// reconcilePartitions compares t's recorded partitions with the leaves the
// catalog lists now (nil: not a partitioned table) at a start that streams
// from the slot. A keyed table whose partitions moved is read again while
// streaming; a keyless one cannot be, and why names it for a resnapshot
// of every table. It records the leaves and reports whether t changed.
func (c *Connector) reconcilePartitions(t *state.Table, now []string, keyed bool) (changed bool, why string) {
	if now == nil || c.test.ignoreShape || t.Partitions != nil && slices.Equal(t.Partitions, now) {
		return false, ""
	}
	if t.Partitions != nil {
		// A table being read already is read again from its beginning:
		// chunks read before the move did not see an attached leaf.
		moved := movedText(partitionsMoved(t.Partitions, now))
		if !keyed {
			return false, fmt.Sprintf("the partitions of %s changed since its rows were read (%s), and keyless Feldera table %s is read again only with every table", t.Source, moved, t.Dest)
		}
		c.logger.Warn("startup: the partitions of a table changed since its rows were read (ATTACH or DETACH PARTITION, which the WAL does not carry as rows); reading it again while the other tables stream",
			"table", t.Source, "moved", moved)
		*t = state.Table{Source: t.Source, Dest: t.Dest, Status: state.Incremental, Retract: true, Fingerprint: t.Fingerprint, Columns: t.Columns}
	}
	t.Partitions = now
	return true, ""
}

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
		if attached, detached := partitionsMoved(known, now); len(attached)+len(detached) > 0 {
			return fmt.Errorf("the partitions of %s changed while streaming (%s): the session restarts to read the table again", w.p.Targets[i].Qualified(), movedText(attached, detached))
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
