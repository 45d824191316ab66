package setup

import (
	"fmt"
	"slices"
	"strings"

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

// PartitionsMoved lists the leaves now has that known lacks (attached)
// and the ones known has that now lacks (detached).
func PartitionsMoved(known, now []string) (attached, detached []string) {
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

// MovedText says what moved, for a log or an error.
func MovedText(attached, detached []string) string {
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
func (c Rules) reconcilePartitions(t *state.Table, now []string, keyed bool) (changed bool, why string) {
	if now == nil || c.IgnoreShape || t.Partitions != nil && slices.Equal(t.Partitions, now) {
		return false, ""
	}
	if t.Partitions != nil {
		// A table being read already is read again from its beginning:
		// chunks read before the move did not see an attached leaf.
		moved := MovedText(PartitionsMoved(t.Partitions, now))
		if !keyed {
			return false, fmt.Sprintf("the partitions of %s changed since its rows were read (%s), and keyless Feldera table %s is read again only with every table", t.Source, moved, t.Dest)
		}
		c.Logger.Warn("startup: the partitions of a table changed since its rows were read (ATTACH or DETACH PARTITION, which the WAL does not carry as rows); reading it again while the other tables stream",
			"table", t.Source, "moved", moved)
		*t = state.Table{Source: t.Source, Dest: t.Dest, Status: state.Incremental, Retract: true, Fingerprint: t.Fingerprint, Columns: t.Columns}
	}
	t.Partitions = now
	return true, ""
}
