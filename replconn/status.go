package replconn

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfeldera/pgfeldera/decode"
)

// EncodeStatus builds a Standby Status Update with every position set
// explicitly. pglogrepl.SendStandbyStatusUpdate copies the write position
// into flush when flush is 0, which would acknowledge what Feldera has not
// completed; this never does.
func EncodeStatus(write, flush, apply pglogrepl.LSN, now time.Time, reply bool) []byte {
	b := make([]byte, 0, 34)
	b = append(b, 'r')
	b = binary.BigEndian.AppendUint64(b, uint64(write))
	b = binary.BigEndian.AppendUint64(b, uint64(flush))
	b = binary.BigEndian.AppendUint64(b, uint64(apply))
	b = binary.BigEndian.AppendUint64(b, uint64(now.Sub(decode.PGEpoch).Microseconds()))
	if reply {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return b
}

// SendStatus sends a Standby Status Update: write is what was received,
// flush what may be released (the slot's confirmed_flush_lsn), apply what
// was applied; reply asks the server to answer at once. write is raised to
// flush: the server expects write ≥ flush.
func SendStatus(conn *pgconn.PgConn, write, flush, apply pglogrepl.LSN, reply bool) error {
	if write < flush {
		write = flush
	}
	buf, err := (&pgproto3.CopyData{Data: EncodeStatus(write, flush, apply, time.Now(), reply)}).Encode(nil)
	if err != nil {
		return err
	}
	return conn.Frontend().SendUnbufferedEncodedCopyData(buf)
}

// StatusInterval derives how often to report from the server's
// wal_sender_timeout: a third of it, clamped to [500ms, 10s]; 0 (disabled)
// still reports every 10s so the slot can release WAL.
func StatusInterval(walSenderTimeout time.Duration) time.Duration {
	if walSenderTimeout <= 0 {
		return 10 * time.Second
	}
	d := walSenderTimeout / 3
	if d < 500*time.Millisecond {
		d = 500 * time.Millisecond
	}
	if d > 10*time.Second {
		d = 10 * time.Second
	}
	return d
}
