package crashtest_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var randomRuns = flag.Int("crashtest.random", 25, "randomised crash histories to run (CRASHTEST_SEED fixes the first seed)")

// history generates a random workload: inserts, non-key and key-changing
// updates, deletes, truncates, multi-table and large transactions.
func history(r *rand.Rand) []string {
	var out []string
	next := 1
	for i, n := 0, 8+r.IntN(12); i < n; i++ {
		switch k := r.IntN(10); {
		case k < 3:
			m := 1 + r.IntN(80)
			out = append(out, fmt.Sprintf("INSERT INTO users SELECT g, 'h%d', g FROM generate_series(%d, %d) g", i, next, next+m-1))
			next += m
		case k < 4:
			m := 150 + r.IntN(250) // larger than BATCH_MAX_ROWS
			out = append(out, fmt.Sprintf("INSERT INTO users SELECT g, 'large', g FROM generate_series(%d, %d) g", next, next+m-1))
			next += m
		case k < 5:
			out = append(out, fmt.Sprintf("UPDATE users SET name = 'u%d', score = score + 1 WHERE id %% %d = 0", i, 2+r.IntN(5)))
		case k < 6:
			out = append(out, fmt.Sprintf("UPDATE users SET id = %d WHERE id = (SELECT min(id) FROM users WHERE id %% %d = 1)", next, 2+r.IntN(3)))
			next++
		case k < 7:
			out = append(out, fmt.Sprintf("DELETE FROM users WHERE id %% %d = %d", 3+r.IntN(5), r.IntN(3)))
		case k < 8:
			out = append(out, fmt.Sprintf("BEGIN; INSERT INTO users VALUES (%d, 'tx', 0); INSERT INTO items SELECT g, 'r%d', 2.5 FROM generate_series(1, %d) g ON CONFLICT DO NOTHING; DELETE FROM items WHERE sku = %d; COMMIT",
				next, i, 1+r.IntN(30), r.IntN(30)))
			next++
		case k < 9:
			if r.IntN(3) == 0 {
				out = append(out, "TRUNCATE users, items")
			} else {
				out = append(out, "TRUNCATE items")
			}
		default:
			out = append(out, fmt.Sprintf("BEGIN; DELETE FROM users WHERE id = %d; INSERT INTO users VALUES (%d, 'reinserted', 1); COMMIT", next-1, next-1))
		}
	}
	return out
}

var randomPoints = append(append([]string{}, streamPoints...), "after_retract")

// TestCrashRandom runs seeded random histories, each crashed at a random
// point (or SIGKILLed when the point is not reached), restarted and
// checked. CRASHTEST_SEED=<n> reproduces a failure.
func TestCrashRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("random crash histories: not in -short")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CRASHTEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CRASHTEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	for i := 0; i < *randomRuns; i++ {
		s := seed + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			r := rand.New(rand.NewPCG(s, s))
			stmts := history(r)
			point := randomPoints[r.IntN(len(randomPoints))]
			n := 1 + r.IntN(3)
			w := newWorld(t, nil)
			p := w.start("CRASH_AT="+point, fmt.Sprintf("CRASH_AFTER_BATCHES=%d", n))
			seeded(w, p, false)
			for _, q := range stmts {
				w.exec(q)
			}
			how := "crash point"
			if code := p.exited(3 * time.Second); code != 70 {
				p.kill() // not reached: an abrupt kill instead
				how = "SIGKILL"
			}
			p2 := w.start()
			if msg := w.caughtUp(p2, 60*time.Second); msg != "" {
				t.Fatalf("CRASHTEST_SEED=%d (%s at %s/%d): %s\nhistory:\n%s", s, how, point, n, msg, strings.Join(stmts, ";\n"))
			}
			if code := p2.stop(t); code != 0 {
				t.Fatalf("CRASHTEST_SEED=%d: restart exited %d", s, code)
			}
			t.Logf("CRASHTEST_SEED=%d: %d statements, %s at %s/%d, nothing lost", s, len(stmts), how, point, n)
		})
	}
}
