package connector

import (
	"context"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfeldera/pgfeldera/replconn"
)

// replSource is what the session loop reads and answers: the replication
// connection, or (in tests) a script of what a walsender would send.
type replSource interface {
	// ReceiveMessage returns the next message, or an error when ctx ends
	// first (the loop's deadline).
	ReceiveMessage(ctx context.Context) (pgproto3.BackendMessage, error)
	// SendStatus sends a Standby Status Update with its three positions.
	SendStatus(write, flush, apply pglogrepl.LSN, reply bool) error
}

// pgSource is the replication connection as a replSource.
type pgSource struct{ *pgconn.PgConn }

func (p pgSource) SendStatus(write, flush, apply pglogrepl.LSN, reply bool) error {
	return replconn.SendStatus(p.PgConn, write, flush, apply, reply)
}
