package delivery

import (
	"bytes"
	"fmt"
	"sync"
)

// Taken is this process's copy of what Feldera's /stats says each
// table's HTTP ingress endpoints took since the pipeline process started
// (total_records, summed over the table's endpoints: Stats.IngressTotals),
// kept without asking: read once, then every answered request adds its
// records. Feldera counts a record when it queues it, as each piece of a
// body is parsed, so a request cut short counts what Feldera kept of it;
// only an answered request says how many that was. So an unanswered or
// failed request makes its table unknown until the next read. The copy
// holds only while pgfeldera is the only client posting to its tables'
// endpoints (each table's endpoint is per format; pgfeldera's format is
// its own). The fence, which sees every answer, is its only writer. Safe
// for concurrent use.
type Taken struct {
	mu          sync.Mutex
	incarnation string            // the pipeline process the counts are of; "": none read
	n           map[string]uint64 // canonical table → records taken
	unknown     map[string]bool   // a request to it got no count back
}

// Read replaces the counts with a /stats read of pipeline process
// incarnation, taken while none of this process's requests was in flight.
func (k *Taken) Read(incarnation string, totals map[string]uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.incarnation, k.n, k.unknown = incarnation, totals, nil
}

// Known reports whether a read was made since the last Reset.
func (k *Taken) Known() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.incarnation != ""
}

// Reset forgets the counts: a new session reads them again.
func (k *Taken) Reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.incarnation, k.n, k.unknown = "", nil, nil
}

// answered counts an answered request's body: every record in it.
func (k *Taken) answered(table string, body []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n != nil {
		k.n[table] += uint64(bytes.Count(body, []byte{'\n'}))
	}
}

// failed marks a table whose request got no count back.
func (k *Taken) failed(table string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.unknown == nil {
		k.unknown = map[string]bool{}
	}
	k.unknown[table] = true
}

// Of is table's count and the pipeline process it is of; ok is false
// when it is not known.
func (k *Taken) Of(table string) (n uint64, incarnation string, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.incarnation == "" || k.unknown[table] {
		return 0, "", false
	}
	return k.n[table], k.incarnation, true
}

// Check compares the counts with a /stats read of incarnation made while
// none of this process's requests was in flight, over tables: a table
// whose count differs had records from another client (or a request
// whose count the process missed); it becomes unknown, and Check names
// it.
func (k *Taken) Check(incarnation string, totals map[string]uint64, tables map[string]bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.incarnation != incarnation {
		return nil
	}
	var err error
	for t := range tables {
		if k.unknown[t] || totals[t] == k.n[t] {
			continue
		}
		if err == nil {
			err = fmt.Errorf("Feldera's ingress endpoints of table %s took %d records, and pgfeldera sent %d: another client posts to it", t, totals[t], k.n[t])
		}
		if k.unknown == nil {
			k.unknown = map[string]bool{}
		}
		k.unknown[t] = true
	}
	return err
}

// Skip is how many records of each table a joined transaction already
// holds (Transactions.Settle): the replay's first records of the table,
// which it sends no more. Rest says what the replay has not yet met.
type Skip map[string]uint64

// Of takes up to lines records of table from the skip and returns how
// many of body's first lines Feldera holds.
func (s Skip) Of(table string, lines int) int {
	n := min(s[table], uint64(lines))
	if n == 0 {
		return 0
	}
	s[table] -= n
	if s[table] == 0 {
		delete(s, table)
	}
	return int(n)
}

// Rest is an error naming a table of which Feldera holds records the
// replay did not meet, nil when there is none.
func (s Skip) Rest() error {
	for t, n := range s {
		return fmt.Errorf("the Feldera transaction left open holds %d more records of table %s than the replay carried up to the position every row in it precedes: another client posted to the table, or the replay differs from what was sent", n, t)
	}
	return nil
}
