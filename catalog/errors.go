package catalog

// RefusedError is the source schema refusing a mapping: a table that does
// not exist, sources that may not share a Feldera table, a key that does
// not match. Retrying cannot fix it; the connector ends the process.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Fatal says a source the catalog refuses ends the process (fatal.Is).
func (e *RefusedError) Fatal() bool { return true }

func refused(err error) error { return &RefusedError{Err: err} }
