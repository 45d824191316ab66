// Package snapshot creates the replication slot with an exported snapshot,
// copies each table under that snapshot (COPY TO STDOUT, text) through the
// same decoder as the stream, and decides the startup plan from the state
// file and the slot. It knows nothing of HTTP.
package snapshot
