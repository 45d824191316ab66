// Package fatal says which errors end the process: those retrying cannot
// fix (a setting, the schema, a value Feldera cannot hold, a state file
// that does not fit), as opposed to a connection or a request that
// failed, which a new session retries. It starts no goroutines and keeps
// no state.
package fatal

import (
	"errors"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Error is an error retrying cannot fix: the process should exit.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Wrap marks err as fatal (nil stays nil; a fatal error is not wrapped
// again).
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Err: err}
}

// Is reports whether err must end the process: marked fatal, a value or
// a schema the decoder refuses, a source the catalog refuses, or records
// Feldera could not parse.
func Is(err error) bool {
	var fe *Error
	var re *decode.RefusalError
	var pe *decode.ParseError
	var ce *catalog.RefusedError
	return errors.As(err, &fe) || errors.As(err, &re) || errors.As(err, &pe) || errors.As(err, &ce) || feldera.IsParseErrors(err)
}
