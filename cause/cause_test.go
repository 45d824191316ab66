package cause_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/cause"
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
		want cause.Cause
	}{
		{"completion timeout", fmt.Errorf("%w: batch 3 on users not complete", delivery.ErrFelderaUnavailable), cause.CompletionTimeout},
		{"completion timeout marked Feldera's", cause.FromFeldera(fmt.Errorf("wait: %w", delivery.ErrFelderaUnavailable)), cause.CompletionTimeout},
		{"a fatal completion timeout", fatal.Wrap(fmt.Errorf("%w: commit stalled", delivery.ErrFelderaUnavailable)), cause.CompletionTimeout},
		{"Feldera API error", fmt.Errorf("post users: %w", api), cause.Feldera},
		{"Feldera, no answer", &feldera.APIError{Op: "GET /stats", Err: io.ErrUnexpectedEOF}, cause.Feldera},
		{"watcher: a restart", cause.FromFeldera(errors.New("feldera pipeline restarted (incarnation a → b)")), cause.Feldera},
		{"Postgres error whose text says feldera", fmt.Errorf("replication: %w", pg), cause.Postgres},
		{"connect", &pgconn.ConnectError{}, cause.Postgres},
		{"receive", cause.FromPostgres(fmt.Errorf("receive: %w", io.ErrUnexpectedEOF)), cause.Postgres},
		{"silent", &replconn.SilentError{For: time.Minute}, cause.Postgres},
		{"stream ended", cause.ErrStreamEnded, cause.Postgres},
		{"a network error", fmt.Errorf("chunk: %w", &net.OpError{Op: "read", Err: errors.New("reset")}), cause.Postgres},
		{"a state file error", errors.New("state: write /var/lib/pgfeldera/state.json: no space left"), cause.Other},
		{"text alone says nothing", errors.New("feldera unavailable: receive from postgres replication connect"), cause.Other},
	} {
		if got := cause.Of(c.err); got != c.want {
			t.Errorf("%s: %v → %s, want %s", c.name, c.err, got, c.want)
		}
	}
}
