// Package decode turns pgoutput (protocol v1, text values) messages and COPY
// text rows into Feldera JSON rows. It owns the relation cache, the mapping
// of Postgres types (by OID) and columns to Feldera fields, the TOAST and
// replica-identity rules, and the value encoders shared by the stream and
// the snapshot. It does no I/O and knows nothing of HTTP or slots.
package decode
