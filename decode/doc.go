// Package decode turns pgoutput (protocol v1, text values) messages and COPY
// text rows into Feldera JSON rows. It owns the relation cache, the mapping
// of columns to Feldera fields, and the TOAST and replica-identity rules;
// the mapping of Postgres types (by OID) to Feldera types and the value
// encoders, which the stream and the snapshot share, are package
// pgvalue's. It does no I/O and knows nothing of HTTP or slots.
package decode
