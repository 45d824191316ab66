package connector

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/incremental"
)

// SetAfterCopyHook runs f after every table was copied and before the
// slot is created (inconsistent mode) or the state saved: tests use it to
// commit rows in exactly that window.
func SetAfterCopyHook(c *Connector, f func()) { c.test.AfterCopy = f }

// SetChunkReadHook runs f with each incremental chunk's table and keys
// (decode.KeyText) after its transaction committed and it was handed to
// the loop, before its high watermark is written: tests change rows of
// the chunk in exactly that window, or hold its watermark back.
func SetChunkReadHook(c *Connector, f func(table string, keys []string)) { c.test.ChunkRead = f }

// DisableChunkWindow makes the incremental snapshot keep every chunk row,
// the stream's changes between the watermarks notwithstanding: the unsafe
// variant that shows the window is what keeps the copy exact.
func DisableChunkWindow(c *Connector) { c.test.NoWindow = true }

// ChunkByKey makes an incremental snapshot read ordinary tables in
// primary-key ranges, as it reads partitioned ones, instead of block
// ranges: tests cover both ways.
func ChunkByKey(c *Connector) { c.test.ChunkByKey = true }

// SkipStartupRetraction makes an incremental resnapshot decided at
// startup read the tables again without first deleting the rows Feldera
// holds and Postgres lacks: the unsafe variant the tests show leaving
// them.
func SkipStartupRetraction(c *Connector) { c.test.NoStartRetract = true }

// FailAfterSlot makes an incremental start fail right after it created
// its slot, before the state records it (as a crash there would), and,
// with unsafe, skip the pending state it writes first: the variant the
// tests show losing what was committed while the old slot was gone.
func FailAfterSlot(c *Connector, unsafe bool) {
	c.test.FailAfterSlot, c.test.NoPendingFirst = true, unsafe
}

// IgnoreRewrite makes block-range chunks ignore that the table was
// rewritten (a new relfilenode) while they read it: the unsafe variant
// that shows the check is what keeps the copy exact.
func IgnoreRewrite(c *Connector) { c.test.NoFilenode = true }

// SetRetractReadHook runs f with each retraction batch's table and the
// keys its snapshot lacks (decode.KeyText), before its high watermark is
// written: tests change those keys in exactly that window.
func SetRetractReadHook(c *Connector, f func(table string, absent []string)) {
	c.test.RetractRead = f
}

// RetractOnly makes a resnapshot stop after its retraction (no chunk is
// read), so a test sees what the retraction alone leaves.
func RetractOnly(c *Connector) { c.test.RetractOnly = true }

// SetSessionHook replaces the replication session with fake(ctx, ack),
// where ack moves the acknowledged position like a completed flush would.
// onBackoff sees every backoff interval the supervisor computes.
func SetSessionHook(c *Connector, fake func(ctx context.Context, ack func(lsn uint64)) error, onBackoff func(time.Duration)) {
	c.test.Session = func(ctx context.Context) error {
		return fake(ctx, func(lsn uint64) {
			if pglogrepl.LSN(lsn) > c.acked {
				c.acked = pglogrepl.LSN(lsn)
				c.ackMoves++
				c.healthy = time.Now()
			}
		})
	}
	c.test.OnBackoff = onBackoff
}

// SetGate forces the acknowledgement gate, whatever the pipeline's model:
// tests use it to show the wrong gate losing data.
func SetGate(c *Connector, g delivery.Gate) { n := int(g); c.test.ForceGate = &n }

// IgnoreRowFilter makes the connector read its sources without the
// publication's row filter, as it did before it read rowfilter: tests use
// it to show the snapshot copying rows the stream will never maintain.
func IgnoreRowFilter(c *Connector) { c.test.IgnoreFilter = true }

// TrustRestores makes a start trust what a fault-tolerant Feldera
// restored: no check of the checkpoint that held what was acknowledged,
// and no check of the tables' definitions: the unsafe variant the tests
// show losing rows.
func TrustRestores(c *Connector) { c.test.TrustRestores = true }

// TrustCheckpoints makes the newest checkpoint listed cover whatever its
// steps say, whichever pipeline process took it and whether /stats
// answered: the unsafe variant the tests show acknowledging lost batches.
func TrustCheckpoints(c *Connector) { c.test.TrustCheckpoints = true }

// CompletedStep is the highest step any completion the session applied
// reported (the ledger's step watermark): a test waits for it before a restart that must find the
// batches complete, not their tokens gone.
func CompletedStep(c *Connector) uint64 { return c.step.Load() }

// NoHeartbeat turns off the replication connection's liveness rule and
// the chunk reads' idle bound: the old behaviour, which the tests show
// hanging on a connection the network dropped without a reset.
func NoHeartbeat(c *Connector) { c.test.NoHeartbeat = true }

// BeforeStartReplication runs f right before each session's
// START_REPLICATION.
func BeforeStartReplication(c *Connector, f func()) { c.test.BeforeStart = f }

// WatermarkNudge is incremental.WatermarkNudge, for the tests that count
// nudges.
const WatermarkNudge = incremental.WatermarkNudge

// IgnoreShapeChanges makes the stream take a column that newly feeds
// Feldera as it comes, and partitions attached or detached, without
// reading the table again: the unsafe variant that leaves existing rows
// without the column's default, and a partition's rows out.
func IgnoreShapeChanges(c *Connector) { c.test.IgnoreShape = true }

// SkipFeedWait makes a Feldera transaction commit without first waiting
// until Feldera fed it every record posted in it: the unsafe variant that
// shows the wait is what keeps a source transaction whole.
func SkipFeedWait(c *Connector) { c.test.NoFeedWait = true }

// KeepProgressRow makes a new slot start without clearing the progress
// row, and TrustProgressRow makes a session skip below a row past the
// server's WAL end: together, the unsafe variant the tests show skipping
// what a new slot streams when the row holds a position of another
// history.
func KeepProgressRow(c *Connector) { c.test.NoReset = true }

// TrustProgressRow: see KeepProgressRow.
func TrustProgressRow(c *Connector) { c.test.NoWALEndGuard = true }

// TrustProgressLoss makes startup skip the check of the progress row
// against the slot: the unsafe variant that streams on from a Feldera
// that went back.
func TrustProgressLoss(c *Connector) { c.test.TrustProgress = true }

// IgnoreTransactionLeftOpen makes the connector ignore the Feldera
// transaction the fence file says a crashed process left open: the unsafe
// variant that shows settling it first is what lets the restart start its
// own.
func IgnoreTransactionLeftOpen(c *Connector) { c.test.NoSettle = true }

// NoJoinCount makes a joined Feldera transaction send again what it
// holds (unsafe): the replay into it puts a keyless table's rows in twice.
func NoJoinCount(c *Connector) { c.test.NoCount = true }

// FromFeldera and FromPostgres mark an error with its side, as the
// session does (cause.go).
var (
	FromFeldera  = fromFeldera
	FromPostgres = fromPostgres
)
