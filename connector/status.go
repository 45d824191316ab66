package connector

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// encodeStatus builds a Standby Status Update with every position set
// explicitly. pglogrepl.SendStandbyStatusUpdate copies the write position
// into flush when flush is 0, which would acknowledge what Feldera has not
// completed; this never does.
func encodeStatus(write, flush, apply pglogrepl.LSN, now time.Time, reply bool) []byte {
	b := make([]byte, 0, 34)
	b = append(b, 'r')
	b = binary.BigEndian.AppendUint64(b, uint64(write))
	b = binary.BigEndian.AppendUint64(b, uint64(flush))
	b = binary.BigEndian.AppendUint64(b, uint64(apply))
	b = binary.BigEndian.AppendUint64(b, uint64(now.Sub(pgEpoch).Microseconds()))
	if reply {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return b
}

func sendStatus(conn *pgconn.PgConn, write, flush pglogrepl.LSN, reply bool) error {
	if write < flush {
		write = flush
	}
	buf, err := (&pgproto3.CopyData{Data: encodeStatus(write, flush, flush, time.Now(), reply)}).Encode(nil)
	if err != nil {
		return err
	}
	return conn.Frontend().SendUnbufferedEncodedCopyData(buf)
}

// statusInterval derives how often to report from the server's
// wal_sender_timeout: a third of it, clamped to [500ms, 10s]; 0 (disabled)
// still reports every 10s so the slot can release WAL.
func statusInterval(walSenderTimeout time.Duration) time.Duration {
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
