// Package table is the Feldera double's state of one table: rows by key
// for a PRIMARY KEY table, a multiset of whole rows otherwise; the
// commands (insert, delete, update) applied to it; the parsing of one
// record into a command's row, with Feldera's field matching and type
// checks (through sqlvalue); and the copies a checkpoint keeps. It knows
// nothing of HTTP or of steps. It starts no goroutines. A Table is not
// safe for concurrent use (the double's lock guards every table), except
// for what reads only its definition, fixed by New: Rel, Keyed,
// Queryable, KeyText and ParseRecord.
package table
