package oracle

// What the tests that run pgbench's tpcb-like transactions into the
// Feldera double share: the pipeline's tables and the invariant every
// state must keep.

import (
	"errors"
	"fmt"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// PgbenchDDL declares pgbench's keyed tables in the pipeline (pgbench -i
// creates them in Postgres; pgbench_history, keyless, is not published).
const PgbenchDDL = `
CREATE TABLE pgbench_accounts (aid INT NOT NULL PRIMARY KEY, bid INT, abalance INT, filler CHAR(84));
CREATE TABLE pgbench_tellers (tid INT NOT NULL PRIMARY KEY, bid INT, tbalance INT, filler CHAR(84));
CREATE TABLE pgbench_branches (bid INT NOT NULL PRIMARY KEY, bbalance INT, filler CHAR(88));
`

// PgbenchTables are the tables PgbenchDDL declares.
var PgbenchTables = []string{"pgbench_accounts", "pgbench_tellers", "pgbench_branches"}

// PgbenchSums checks a state: pgbench's tpcb-like transaction adds one delta to
// an account, a teller and a branch, so in every state Postgres had the
// three sums are equal; why says what broke. States before the
// snapshot's 100,000 accounts are in are not summed: pgbench -i starts
// every balance at 0, so they hold trivially, and summing 100,000
// accounts at each of the snapshot's steps (under -race, with the double
// locked meanwhile) made the tests take minutes.
func PgbenchSums(v felderatest.View) (ok bool, why string) {
	if v.Len("pgbench_accounts") < 100_000 {
		return true, ""
	}
	a, err1 := v.SumInt("pgbench_accounts", "abalance")
	tl, err2 := v.SumInt("pgbench_tellers", "tbalance")
	b, err3 := v.SumInt("pgbench_branches", "bbalance")
	if err := errors.Join(err1, err2, err3); err != nil {
		return false, err.Error()
	}
	return a == tl && tl == b, fmt.Sprintf("sum(abalance)=%d sum(tbalance)=%d sum(bbalance)=%d", a, tl, b)
}
