package connector

import (
	"time"
)

// Observer receives events worth a histogram or a labelled counter. All
// methods may be called from several goroutines.
type Observer interface {
	// Batch is a batch Feldera took: rows, time spent POSTing, time spent
	// waiting for completion.
	Batch(rows int, post, wait time.Duration)
	// FelderaError is a failed Feldera request, by error code.
	FelderaError(code string)
	// SessionEnded is a replication session that ended with an error.
	SessionEnded(cause string)
	// Stage is the time from a source transaction's commit to a stage.
	Stage(stage Stage, since time.Duration)
}
