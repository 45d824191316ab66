// Package catalog is the source side's schema as pgfeldera reads it from
// PostgreSQL: the TABLES mapping, identifiers and their quoting, the
// types beyond the built-ins, primary keys, leaf partitions' replica
// identities, and the Feldera DDL printed from all of it (`pgfeldera
// ddl`). Its queries live beside their parsers. It starts no goroutines;
// its values are immutable once read and safe for concurrent use.
package catalog
