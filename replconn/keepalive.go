package replconn

import "github.com/jackc/pglogrepl"

// IdleKeepalive reports whether a keepalive that found nothing pending
// (nothing open, buffered or in flight) shows the session idle, which
// restarts the NO_PROGRESS_TIMEOUT clock: only once the server has sent
// everything it had when the session began (walEnd, the keepalive's
// position, at or past startEnd). PostgreSQL 18.4 sends a keepalive at
// the slot's confirmed position as streaming starts, before the WAL after
// it; taken as idle, it restarted the clock at every reconnect, and a
// Feldera that never completed kept the process reconnecting forever
// instead of exiting 1 (TestBinary_NoProgressTimeoutExits1 on 18.4).
func IdleKeepalive(walEnd, startEnd pglogrepl.LSN) bool {
	return walEnd >= startEnd
}
