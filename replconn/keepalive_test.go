package replconn

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// A keepalive restarts the NO_PROGRESS_TIMEOUT clock only once the
// session has been sent all the WAL the server had when it began: the
// keepalive PostgreSQL 18.4 sends at the slot's confirmed position as
// streaming starts, before the unacknowledged transaction after it, does
// not.
func TestIdleKeepalive(t *testing.T) {
	for _, c := range []struct {
		name             string
		walEnd, startEnd pglogrepl.LSN
		want             bool
	}{
		{"at the confirmed position, WAL after it still to come", 0x1B8B3D0, 0x1B8B600, false},
		{"at the server's WAL end when the session began", 0x1B8B600, 0x1B8B600, true},
		{"past it (an idle server's later WAL)", 0x1C00000, 0x1B8B600, true},
	} {
		if got := IdleKeepalive(c.walEnd, c.startEnd); got != c.want {
			t.Errorf("%s: IdleKeepalive(%s, %s) = %v, want %v", c.name, c.walEnd, c.startEnd, got, c.want)
		}
	}
}
