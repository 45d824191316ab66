package delivery

import "github.com/jackc/pglogrepl"

// Join is the rule by which a session commits the Feldera transaction it
// joined (delivery.Transactions.Settle): a crash left it open holding a
// prefix of the stream past the progress row, and the replay goes on in
// it. Every row the dead process posted belongs to a source transaction
// committed before this session began (pgoutput sends a transaction once
// it committed), so at or below the server's WAL end then (Until). The
// joined transaction may commit once the replay has carried everything
// up to there: at a batch that ends at a COMMIT at or past Until, or,
// when no such COMMIT comes, once a keepalive with nothing open says the
// walsender sent everything up to Until. Committed earlier, it would show
// rows of source transactions past its progress row.
type Join struct {
	Until   pglogrepl.LSN // the server's WAL end when the session began; 0: no transaction joined
	reached bool          // the walsender sent everything up to Until
}

// Keepalive applies a keepalive whose WAL end is walEnd (what the
// walsender sent); open says a source transaction is open.
func (j *Join) Keepalive(walEnd pglogrepl.LSN, open bool) {
	if j.Until != 0 && !open && walEnd >= j.Until {
		j.reached = true
	}
}

// Holds reports whether the joined transaction must stay open past a
// batch whose last COMMIT ends at commit (0: none).
func (j *Join) Holds(commit pglogrepl.LSN) bool {
	return j.Until != 0 && !j.reached && commit < j.Until
}

// Ended forgets the joined transaction: it committed.
func (j *Join) Ended() { *j = Join{} }
