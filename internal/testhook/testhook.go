// Package testhook is the one seam through which tests reach into a
// running connector: the unsafe variants that show a test can see a loss,
// and callbacks at the moments a test must act in. A Connector holds one
// Hooks value, zero in production, and every part it builds (the start,
// the incremental snapshot, the sender) reads that same value through a
// pointer; only the connector's export_test.go sets it. A nil *Hooks
// reads as the zero value (Get), so a part built alone needs none.
//
// It imports nothing, starts no goroutines, and is read while tests are
// the only writers, before the parts run.
package testhook

import (
	"context"
	"time"
)

// Hooks are every seam, zero in production: the documented behaviour.
type Hooks struct {
	// The session and its supervisor.
	Session     func(ctx context.Context) error // replaces a session
	OnBackoff   func(interval time.Duration)    // sees each backoff interval
	BeforeStart func()                          // runs right before START_REPLICATION
	ForceGate   *int                            // the ack gate (a delivery.Gate), whatever the model says
	NoHeartbeat bool                            // no liveness timeout on the replication and chunk connections (unsafe)

	// A session's start and what it trusts.
	AfterCopy        func() // runs after the copy, before the slot (inconsistent) or the state
	NoPendingFirst   bool   // a snapshot start records no pending state first (unsafe)
	FailAfterSlot    bool   // an incremental start fails right after creating its slot
	NoStartRetract   bool   // an incremental resnapshot at startup skips the retraction (unsafe)
	IgnoreFilter     bool   // read sources without the publication's row filter (unsafe)
	TrustRestores    bool   // no check of what a restart restored (unsafe)
	TrustCheckpoints bool   // any newest checkpoint covers by its steps (unsafe)
	IgnoreShape      bool   // no resnapshot when a table's shape changes (unsafe)

	// The incremental snapshot's worker and loop.
	ChunkRead   func(table string, keys []string)   // sees each chunk handed
	RetractRead func(table string, absent []string) // sees each retraction batch
	ChunkByKey  bool                                // read ordinary tables in key ranges too
	NoFilenode  bool                                // block chunks ignore a rewrite (unsafe)
	RetractOnly bool                                // a resnapshot retracts and reads no chunk
	NoWindow    bool                                // keep every chunk row (unsafe)

	// Feldera transactions and the progress row.
	NoSettle        bool // ignore the Feldera transaction a crashed process left open (unsafe)
	NoJoin          bool // commit a Feldera transaction left open instead of joining it (unsafe)
	NoCount         bool // a joined transaction sends again what it holds (unsafe)
	NoFeedWait      bool // commit a Feldera transaction without waiting for its input to be fed (unsafe)
	CommitOnFailure bool // commit a transaction a failure leaves open even with the progress row (unsafe)
	NoSkip          bool // replay what the progress row says Feldera holds (unsafe)
	NoReset         bool // keep the progress row when a new slot starts (unsafe)
	NoWALEndGuard   bool // skip below a progress row past the server's WAL end (unsafe)
	NoProgressStep  bool // acknowledge a skip under the checkpoint gate at once (unsafe)
	NoKeepRows      bool // let the slot pass the progress row at COMMITs and keepalives without rows (unsafe)
	TrustProgress   bool // no check of the progress row against the slot at startup (unsafe)
}

// Get is h's value, the zero Hooks for nil.
func (h *Hooks) Get() Hooks {
	if h == nil {
		return Hooks{}
	}
	return *h
}
