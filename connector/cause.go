package connector

import (
	"github.com/pgfeldera/pgfeldera/cause"
	"github.com/pgfeldera/pgfeldera/delivery"
)

// ErrFelderaUnavailable ends a session whose batch, transaction or commit
// Feldera did not finish within FELDERA_COMPLETION_TIMEOUT or
// FELDERA_COMMIT_STALL_TIMEOUT.
var ErrFelderaUnavailable = delivery.ErrFelderaUnavailable

// ErrStreamEnded ends a session whose server ended the replication stream
// (CopyDone), or whose session returned without an error
// (cause.ErrStreamEnded).
var ErrStreamEnded = cause.ErrStreamEnded

// fromPostgres marks err as the replication connection's
// (cause.FromPostgres).
func fromPostgres(err error) error { return cause.FromPostgres(err) }

// fromFeldera marks err as Feldera's (cause.FromFeldera).
func fromFeldera(err error) error { return cause.FromFeldera(err) }
