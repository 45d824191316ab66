// Package fatal says which errors end the process: those retrying cannot
// fix (a setting, the schema, a value Feldera cannot hold, a state file
// that does not fit), as opposed to a connection or a request that
// failed, which a new session retries. It starts no goroutines and keeps
// no state.
package fatal

import "errors"

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

// Is reports whether err must end the process: marked fatal by Wrap, or
// an error in its chain says so itself with a Fatal method (a value or a
// schema the decoder refuses, a source the catalog refuses, records
// Feldera could not parse). The error types carry the rule, so this
// package imports none of theirs.
func Is(err error) bool {
	for err != nil {
		switch e := err.(type) {
		case *Error:
			return true
		case interface{ Fatal() bool }:
			if e.Fatal() {
				return true
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if Is(inner) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}
