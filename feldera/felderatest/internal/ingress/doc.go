// Package ingress parses the Feldera double's ingress bodies: a request's
// format parameters (format, update_format, array), and NDJSON or JSON
// arrays of insert/delete/update envelopes (or raw records) into commands
// for a table, with the parse errors Feldera reports for bad events,
// numbered across the chunks of one request; and the reading of a body
// read by read, each split at record boundaries. Taking the request and
// answering it is the double's (felderatest); this package knows nothing
// of HTTP. It starts no goroutines; its functions keep no state and read
// only a table's definition, which never changes: they are safe for
// concurrent use.
package ingress
