package delivery

import (
	"testing"
	"time"
)

// Whenever the filling batch has a linger deadline, the batch is due once
// it passes: the stream loop bounds its receive by the deadline, and a
// receive whose deadline has passed ends before it reads, so a deadline
// that passed without making the batch due would stop the stream for
// good. Every combination of rows, the bounds, a table's last chunk
// (sealNow), an open source transaction (with rows of it in the batch or
// not yet) and the linger setting.
func TestLingerDeadlineMakesTheBatchDue(t *testing.T) {
	for _, rows := range []int{0, 1, 9, 10} {
		for _, big := range []bool{false, true} {
			for _, sealNow := range []bool{false, true} {
				for _, open := range []bool{false, true} {
					for _, openRows := range []bool{false, true} {
						if openRows && (!open || rows == 0) {
							continue
						}
						for _, linger := range []time.Duration{0, 50 * time.Millisecond} {
							s, _ := newTestPipeline()
							s.Bounds, s.Linger, s.MaxFlight = Bounds{Rows: 10, Bytes: 1 << 10}, linger, 4
							s.open, s.openRows = open, openRows
							at := time.Unix(1000, 0)
							for i := 0; i < rows; i++ {
								line := []byte("{}\n")
								if big {
									line = make([]byte, 600)
								}
								s.filling.Bufs[0] = append(s.filling.Bufs[0], line...)
								s.filling.Added(0, 1, at)
							}
							s.filling.SealNow = sealNow
							d, ok := s.LingerDeadline()
							if ok && !s.FlushDue(d) {
								t.Errorf("rows=%d big=%v sealNow=%v open=%v linger=%v: the linger deadline %v passes with the batch not due",
									rows, big, sealNow, open, linger, d.Sub(at))
							}
							if !ok && rows > 0 && !open && !s.FlushDue(at.Add(time.Hour)) {
								t.Errorf("rows=%d big=%v sealNow=%v open=%v linger=%v: no deadline, and the batch is never due outside a transaction",
									rows, big, sealNow, open, linger)
							}
							// Rows of the open transaction wait for its COMMIT:
							// the linger never seals them.
							if openRows && (ok || s.FlushDue(at.Add(time.Hour))) {
								t.Errorf("rows=%d big=%v sealNow=%v linger=%v: a batch holding rows of the open transaction is due (deadline %v)",
									rows, big, sealNow, linger, ok)
							}
						}
					}
				}
			}
		}
	}
}
