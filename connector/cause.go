package connector

import (
	"errors"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// Cause is why a session ended: the label of pgfeldera_reconnects_total.
type Cause string

// The causes. Their names are part of the metrics contract.
const (
	CauseCompletionTimeout Cause = "completion_timeout" // Feldera did not finish work within its timeout
	CauseFeldera           Cause = "feldera"            // Feldera failed a request, restarted or was redeployed
	CausePostgres          Cause = "postgres"           // the replication connection or a query failed, or went silent
	CauseOther             Cause = "other"
)

// ErrStreamEnded ends a session whose server ended the replication stream
// (CopyDone), or whose session returned without an error.
var ErrStreamEnded = errors.New("replication: server ended the stream")

// sideError marks an error with the side it came from, where its type
// does not say: the replication connection's I/O, the pipeline watcher.
type sideError struct {
	cause Cause
	err   error
}

func (e *sideError) Error() string { return e.err.Error() }
func (e *sideError) Unwrap() error { return e.err }

// fromPostgres marks err as the replication connection's.
func fromPostgres(err error) error {
	if err == nil {
		return nil
	}
	return &sideError{cause: CausePostgres, err: err}
}

// fromFeldera marks err as Feldera's.
func fromFeldera(err error) error {
	if err == nil {
		return nil
	}
	return &sideError{cause: CauseFeldera, err: err}
}

// CauseOf is why err ended a session: a timeout waiting for Feldera
// first (it is Feldera's too, and named apart), then the side the error
// was marked with, then its type: a Feldera API error is Feldera's, a
// Postgres error, a failed connection or a silent replication connection
// is Postgres's.
func CauseOf(err error) Cause {
	if errors.Is(err, delivery.ErrFelderaUnavailable) {
		return CauseCompletionTimeout
	}
	var side *sideError
	if errors.As(err, &side) {
		return side.cause
	}
	var (
		api     *feldera.APIError
		pg      *pgconn.PgError
		connect *pgconn.ConnectError
		silent  *replconn.SilentError
	)
	switch {
	case errors.As(err, &api):
		return CauseFeldera
	case errors.As(err, &pg), errors.As(err, &connect), errors.As(err, &silent), errors.Is(err, ErrStreamEnded):
		return CausePostgres
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return CausePostgres // the Feldera client's network errors are APIErrors
	}
	return CauseOther
}
