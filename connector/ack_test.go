package connector_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/connector"
)

// With wal_sender_timeout = 4s and Feldera taking 20 s to complete a batch,
// status updates must keep flowing during the wait: one session, one POST.
func TestStream_StatusUpdatesDuringLongCompletion(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	c := pgcluster.New(t, pgcluster.Options{Settings: map[string]string{"wal_sender_timeout": "4s"}})
	e := newEnvOn(t, c, mixedPG, mixedFeldera, nil)
	e.fel.SetCompletionDelay(20 * time.Second)
	e.start(e.config("users,public.items:catalog_items"))
	e.waitSlot()
	e.exec("INSERT INTO users VALUES (1, 'slow', 1)")
	target := e.currentLSN()
	start := time.Now()
	e.waitConfirmed(target, 45*time.Second)
	if el := time.Since(start); el < 19*time.Second {
		t.Fatalf("acked after %s, before Feldera completed (20 s)", el)
	}
	if n := strings.Count(e.logs.String(), "session: streaming"); n != 1 {
		t.Fatalf("%d sessions, want 1 (wal_sender_timeout closed the connection?)\n%s", n, tail(e.logs.String(), 3000))
	}
	if n := len(e.fel.Requests()); n != 1 {
		t.Fatalf("%d ingress requests, want 1 (a re-POST)", n)
	}
	e.assertEqual("users", "users")
}

// Completed mode does not move the slot while Feldera holds completion;
// accepted mode does (that is the loss it exists to demonstrate).
func TestStream_AckModes(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, mode := range []string{connector.AckCompleted, connector.AckAccepted} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			e.fel.HoldCompletion(true)
			cfg := e.config("users,public.items:catalog_items")
			cfg.AckMode = mode
			e.start(cfg)
			e.waitSlot()
			before := e.confirmed()
			e.exec("INSERT INTO users VALUES (1, 'held', 1)")
			var commitEnd = e.currentLSN()
			moved := false
			switch mode {
			case connector.AckCompleted:
				// The connector sent the row and has been told three
				// times that it is not complete: the slot must not move.
				polls := e.fel.PendingPolls()
				e.poll("the held request and three inprogress answers", 30*time.Second, func() bool {
					return len(e.fel.Requests()) >= 1 && e.fel.PendingPolls() >= polls+3
				})
				moved = e.confirmed() >= commitEnd
			case connector.AckAccepted:
				e.poll("accepted mode to ack on HTTP 200", 30*time.Second, func() bool {
					moved = e.confirmed() >= commitEnd
					return moved
				})
			}
			switch mode {
			case connector.AckCompleted:
				if moved {
					t.Fatalf("completed mode acked %s (before %s) while completion was held", e.confirmed(), before)
				}
				if n := len(e.fel.Rows("users")); n != 0 {
					t.Fatalf("held data applied: %d", n)
				}
				e.fel.HoldCompletion(false)
				e.waitConfirmed(commitEnd, 30*time.Second)
			case connector.AckAccepted:
				if !moved {
					t.Fatalf("accepted mode did not ack on HTTP 200: confirmed %s < %s", e.confirmed(), commitEnd)
				}
				// Feldera restarts before completing: the acked row is gone for good.
				e.fel.Restart()
				e.fel.HoldCompletion(false)
				if n := len(e.fel.Rows("users")); n != 0 {
					t.Fatalf("restart kept %d rows", n)
				}
				if d := e.diff("users", "users"); !strings.Contains(d, "missing in feldera") {
					t.Fatalf("the oracle did not see the loss: %q", d)
				}
			}
		})
	}
}
