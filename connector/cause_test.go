package connector

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/startup"
)

// Why a session ended, for pgfeldera_reconnects_total{cause}: by the kind
// of the error, never by its text (a Postgres error whose message says
// "feldera" is still Postgres's).
func TestSessionCause(t *testing.T) {
	api := &feldera.APIError{Op: "POST /v0/pipelines/p/ingress/users", StatusCode: 503}
	pg := &pgconn.PgError{Code: "57P01", Message: "terminating connection: feldera unavailable"}
	for _, c := range []struct {
		name string
		err  error
		want Cause
	}{
		{"completion timeout", fmt.Errorf("%w: batch 3 on users not complete", ErrFelderaUnavailable), CauseCompletionTimeout},
		{"completion timeout marked Feldera's", fromFeldera(fmt.Errorf("wait: %w", ErrFelderaUnavailable)), CauseCompletionTimeout},
		{"a fatal completion timeout", fatal.Wrap(fmt.Errorf("%w: commit stalled", ErrFelderaUnavailable)), CauseCompletionTimeout},
		{"Feldera API error", fmt.Errorf("post users: %w", api), CauseFeldera},
		{"Feldera, no answer", &feldera.APIError{Op: "GET /stats", Err: io.ErrUnexpectedEOF}, CauseFeldera},
		{"watcher: a restart", fromFeldera(errors.New("feldera pipeline restarted (incarnation a → b)")), CauseFeldera},
		{"Postgres error whose text says feldera", fmt.Errorf("replication: %w", pg), CausePostgres},
		{"connect", &pgconn.ConnectError{}, CausePostgres},
		{"receive", fromPostgres(fmt.Errorf("receive: %w", io.ErrUnexpectedEOF)), CausePostgres},
		{"start replication", &startup.ReplicationError{Err: fmt.Errorf("start replication on slot s: %w", io.ErrUnexpectedEOF)}, CausePostgres},
		{"silent", &SilentError{For: time.Minute}, CausePostgres},
		{"stream ended", ErrStreamEnded, CausePostgres},
		{"a network error", fmt.Errorf("chunk: %w", &net.OpError{Op: "read", Err: errors.New("reset")}), CausePostgres},
		{"a state file error", errors.New("state: write /var/lib/pgfeldera/state.json: no space left"), CauseOther},
		{"text alone says nothing", errors.New("feldera unavailable: receive from postgres replication connect"), CauseOther},
	} {
		if got := sessionCause(c.err); got != c.want {
			t.Errorf("%s: %v → %s, want %s", c.name, c.err, got, c.want)
		}
	}
}
