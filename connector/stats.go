package connector

import "sync/atomic"

// Stats are live counters of a Connector, safe to read from any goroutine
// (the demo's display and the metrics read them).
type Stats struct {
	SnapshotRows atomic.Int64  // rows copied by snapshots
	StreamRows   atomic.Int64  // insert/delete lines decoded from the stream
	Batches      atomic.Int64  // batches Feldera completed (or accepted, in accepted mode)
	Retracted    atomic.Int64  // delete lines sent by retractions
	Sessions     atomic.Int64  // replication sessions started
	Received     atomic.Uint64 // highest WAL position read
	Acked        atomic.Uint64 // flush position sent to Postgres
}

// Stats returns the connector's live counters.
func (c *Connector) Stats() *Stats { return &c.stats }
