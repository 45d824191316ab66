package replconn

import (
	"fmt"
	"time"
)

// Liveness is the replication stream's heartbeat rule, the one
// PostgreSQL's walreceiver keeps with wal_receiver_timeout: the stream is
// alive while the server speaks. Half the timeout after the last message,
// a status update asks for a reply (a keepalive comes back at once from a
// live walsender, even an idle one); with nothing by the timeout, the
// connection is dead (a NAT or load balancer that dropped the flow, an
// address that no longer answers, a frozen server), and the session ends
// instead of writing status updates into it until the kernel gives up
// (about 15 minutes of retransmissions).
//
// It counts only time spent listening: a wait that reads nothing (the
// outbox full, a retraction draining) restarts it when it ends.
type Liveness struct {
	Timeout time.Duration
	Heard   time.Time // the last message, or when listening began again
	asked   bool      // a reply was asked for since
}

// HeardAt records a message, or the start of listening, at t.
func (l *Liveness) HeardAt(t time.Time) { l.Heard, l.asked = t, false }

// Next says what is due at now: ask, a status update that asks for a
// reply (once per silence); dead, the connection is silent past the
// timeout; and at, when to look again.
func (l *Liveness) Next(now time.Time) (ask, dead bool, at time.Time) {
	if l.Timeout <= 0 {
		return false, false, time.Time{}
	}
	half, end := l.Heard.Add(l.Timeout/2), l.Heard.Add(l.Timeout)
	switch {
	case !now.Before(end):
		return false, true, end
	case !now.Before(half) && !l.asked:
		l.asked = true
		return true, false, end
	case l.asked:
		return false, false, end
	}
	return false, false, half
}

// SilentError ends a session whose replication connection said nothing
// for its timeout (PG_REPLICATION_TIMEOUT): the next session reconnects,
// ending the walsender that may still hold the slot.
type SilentError struct{ For time.Duration }

func (e *SilentError) Error() string {
	return fmt.Sprintf("replication connection silent for %s (PG_REPLICATION_TIMEOUT): the server or the network stopped answering; reconnecting", e.For.Round(time.Millisecond))
}

// Timeout is the liveness timeout: the setting, else the server's
// wal_sender_timeout, else (disabled there) 60 s.
func Timeout(setting, walSenderTimeout time.Duration) time.Duration {
	switch {
	case setting > 0:
		return setting
	case walSenderTimeout > 0:
		return walSenderTimeout
	}
	return 60 * time.Second
}
