package connector_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
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
		want connector.Cause
	}{
		{"completion timeout", fmt.Errorf("%w: batch 3 on users not complete", delivery.ErrFelderaUnavailable), connector.CauseCompletionTimeout},
		{"completion timeout marked Feldera's", connector.FromFeldera(fmt.Errorf("wait: %w", delivery.ErrFelderaUnavailable)), connector.CauseCompletionTimeout},
		{"a fatal completion timeout", fatal.Wrap(fmt.Errorf("%w: commit stalled", delivery.ErrFelderaUnavailable)), connector.CauseCompletionTimeout},
		{"Feldera API error", fmt.Errorf("post users: %w", api), connector.CauseFeldera},
		{"Feldera, no answer", &feldera.APIError{Op: "GET /stats", Err: io.ErrUnexpectedEOF}, connector.CauseFeldera},
		{"watcher: a restart", connector.FromFeldera(errors.New("feldera pipeline restarted (incarnation a → b)")), connector.CauseFeldera},
		{"Postgres error whose text says feldera", fmt.Errorf("replication: %w", pg), connector.CausePostgres},
		{"connect", &pgconn.ConnectError{}, connector.CausePostgres},
		{"receive", connector.FromPostgres(fmt.Errorf("receive: %w", io.ErrUnexpectedEOF)), connector.CausePostgres},
		{"silent", &replconn.SilentError{For: time.Minute}, connector.CausePostgres},
		{"stream ended", connector.ErrStreamEnded, connector.CausePostgres},
		{"a network error", fmt.Errorf("chunk: %w", &net.OpError{Op: "read", Err: errors.New("reset")}), connector.CausePostgres},
		{"a state file error", errors.New("state: write /var/lib/pgfeldera/state.json: no space left"), connector.CauseOther},
		{"text alone says nothing", errors.New("feldera unavailable: receive from postgres replication connect"), connector.CauseOther},
	} {
		if got := connector.CauseOf(c.err); got != c.want {
			t.Errorf("%s: %v → %s, want %s", c.name, c.err, got, c.want)
		}
	}
}
