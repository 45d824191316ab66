package setup

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// partitionCheckEvery is how many watcher ticks pass between two reads of
// the partitions (about 10 s).
const partitionCheckEvery = 5

// PartitionWatch reads the leaves of the session's partitioned tables
// while it streams, on a connection of its own (see partitions.go).
type PartitionWatch struct {
	DSN    string
	Plan   *Plan
	Logger *slog.Logger
	// IgnoreShape looks at nothing: a test's unsafe variant; false in
	// production.
	IgnoreShape bool
	conn        *pgx.Conn
}

// Check returns an error that ends the session when a partitioned table's
// leaves differ from the ones the session began with.
func (w *PartitionWatch) Check(ctx context.Context) error {
	if w.IgnoreShape || !slices.ContainsFunc(w.Plan.Leaves, func(l []string) bool { return l != nil }) {
		return nil
	}
	if w.conn == nil || w.conn.IsClosed() {
		conn, err := replconn.Connect(ctx, w.DSN)
		if err != nil {
			w.Logger.Warn("partitions: cannot connect to read the partitions; trying again at the next check", "err", err)
			return nil
		}
		w.conn = conn
	}
	for i, known := range w.Plan.Leaves {
		if known == nil {
			continue
		}
		leaves, err := catalog.ReadLeafIdentities(ctx, w.conn, w.Plan.Targets[i].Source())
		if err != nil {
			w.Logger.Warn("partitions: read failed; trying again at the next check", "err", err)
			w.Close()
			return nil
		}
		now := make([]string, len(leaves))
		for j, l := range leaves {
			now[j] = l.Name
		}
		if attached, detached := PartitionsMoved(known, now); len(attached)+len(detached) > 0 {
			return fmt.Errorf("the partitions of %s changed while streaming (%s): the session restarts to read the table again", w.Plan.Targets[i].Qualified(), MovedText(attached, detached))
		}
	}
	return nil
}

// Every is the partition check on the watcher's schedule: every
// partitionCheckEvery-th look.
func (w *PartitionWatch) Every(ctx context.Context, n int) error {
	if n%partitionCheckEvery != partitionCheckEvery-1 {
		return nil
	}
	return w.Check(ctx)
}

// Close closes the watch's connection, if open.
func (w *PartitionWatch) Close() {
	if w.conn != nil {
		w.conn.Close(context.Background())
		w.conn = nil
	}
}
