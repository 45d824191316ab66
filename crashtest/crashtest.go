// Package crashtest injects crashes at named points of the delivery path so
// tests can prove that a crash anywhere replays and never skips.
//
// Configure arms one point (CRASH_AT) and a batch count
// (CRASH_AFTER_BATCHES, default 1). Point(name) is called by the connector
// each time a batch passes a point; on the n-th pass of the armed point the
// process exits at once with ExitCode: no deferred cleanup, no final status
// update, as a kill would. Unarmed, Point is a cheap no-op.
package crashtest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
)

// ExitCode is the exit status of a crash point.
const ExitCode = 70

// Points are the crash points, in the order the pipeline passes them.
var Points = []string{
	"after_decode",          // a batch is decoded into the outbox, nothing sent
	"after_post",            // POST accepted (200), completion not yet seen
	"after_complete",        // completion token complete, status not yet sent
	"after_ack",             // standby status with the new flush_lsn sent
	"snapshot_after_batch",  // a snapshot batch is complete in Feldera
	"snapshot_before_state", // every snapshot batch complete, state not saved
	"after_retract",         // retraction deletes complete, position not moved
	"retract_after_batch",   // one batch of a retraction's deletes complete, more may follow
	"after_begin",           // a Feldera transaction was started (FELDERA_TRANSACTIONS), nothing of it sent
	"before_commit",         // every POST of a Feldera transaction answered and taken, the commit not yet asked
	"snapshot_after_chunk",  // an incremental snapshot's chunk is durable in Feldera and recorded in the state file
}

var (
	armed     atomic.Pointer[string]
	remaining atomic.Int64
	exit      = func() { os.Exit(ExitCode) }
)

// Valid reports whether name is a crash point.
func Valid(name string) bool { return slices.Contains(Points, name) }

// Configure arms point (empty disarms) to fire on its afterBatches-th pass.
func Configure(point string, afterBatches int) error {
	if point == "" {
		armed.Store(nil)
		return nil
	}
	if !Valid(point) {
		return fmt.Errorf("CRASH_AT=%q is not a crash point; allowed: %s", point, strings.Join(Points, ", "))
	}
	if afterBatches < 1 {
		return fmt.Errorf("CRASH_AFTER_BATCHES=%d must be at least 1", afterBatches)
	}
	remaining.Store(int64(afterBatches))
	armed.Store(&point)
	return nil
}

// Point marks that a batch passed the named point.
func Point(name string) {
	p := armed.Load()
	if p == nil || *p != name {
		return
	}
	if remaining.Add(-1) == 0 {
		fmt.Fprintf(os.Stderr, "pgfeldera: crash point %s reached: exiting with %d\n", name, ExitCode)
		exit()
	}
}

type quietKey struct{}

// Quiet marks ctx so that PointIn under it neither fires nor counts: the
// work of a batch that carries no rows (the progress row alone), which
// the crash matrix's batch numbers do not count.
func Quiet(ctx context.Context) context.Context { return context.WithValue(ctx, quietKey{}, true) }

// PointIn is Point, unless ctx is Quiet.
func PointIn(ctx context.Context, name string) {
	if ctx.Value(quietKey{}) == nil {
		Point(name)
	}
}
