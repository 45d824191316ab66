// Package pgoutputtest builds what a walsender sends, for tests: pgoutput
// messages (protocol version 1) and the replication protocol's framing
// around them (XLogData, primary keepalives). The decoder's tests and the
// connector's scripted replication source share it. It starts no
// goroutines.
package pgoutputtest

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// Msg is a message under construction: each method appends a field.
type Msg []byte

func (m Msg) U8(b byte) Msg     { return append(m, b) }
func (m Msg) U16(v uint16) Msg  { return binary.BigEndian.AppendUint16(m, v) }
func (m Msg) U32(v uint32) Msg  { return binary.BigEndian.AppendUint32(m, v) }
func (m Msg) U64(v uint64) Msg  { return binary.BigEndian.AppendUint64(m, v) }
func (m Msg) Str(s string) Msg  { return append(append(m, s...), 0) }
func (m Msg) Text(s string) Msg { return m.U8('t').U32(uint32(len(s))).Append(s) }
func (m Msg) Append(s string) Msg {
	return append(m, s...)
}

// Col is a column of a Relation message.
type Col struct {
	Name string
	OID  uint32
	Key  bool
}

// Null and Toast are tuple values: SQL NULL, and an unchanged TOASTed
// value. Any other string is sent as text.
const Null, Toast = "\x00n", "\x00u"

// Relation is a Relation message; ident is the replica identity
// ('d', 'n', 'f' or 'i').
func Relation(id uint32, ns, name string, ident byte, cols ...Col) []byte {
	m := Msg{'R'}.U32(id).Str(ns).Str(name).U8(ident).U16(uint16(len(cols)))
	for _, c := range cols {
		var f byte
		if c.Key {
			f = 1
		}
		m = m.U8(f).Str(c.Name).U32(c.OID).U32(0xffffffff)
	}
	return m
}

// Tuple appends a tuple of vals to m.
func Tuple(m Msg, vals ...string) Msg {
	m = m.U16(uint16(len(vals)))
	for _, v := range vals {
		switch v {
		case Null:
			m = m.U8('n')
		case Toast:
			m = m.U8('u')
		default:
			m = m.Text(v)
		}
	}
	return m
}

// Insert is an Insert message.
func Insert(rel uint32, vals ...string) []byte { return Tuple(Msg{'I'}.U32(rel).U8('N'), vals...) }

// Delete is a Delete message; kind is 'K' (key) or 'O' (old row).
func Delete(rel uint32, kind byte, vals ...string) []byte {
	return Tuple(Msg{'D'}.U32(rel).U8(kind), vals...)
}

// Update is an Update message; kind 0 sends no old tuple.
func Update(rel uint32, kind byte, old []string, vals ...string) []byte {
	m := Msg{'U'}.U32(rel)
	if kind != 0 {
		m = Tuple(m.U8(kind), old...)
	}
	return Tuple(m.U8('N'), vals...)
}

// Epoch is PostgreSQL's: timestamps count microseconds from it.
var Epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func pgTime(t time.Time) uint64 { return uint64(t.Sub(Epoch).Microseconds()) }

// Begin is a Begin message of a transaction that commits at final.
func Begin(final pglogrepl.LSN, at time.Time, xid uint32) []byte {
	return Msg{'B'}.U64(uint64(final)).U64(pgTime(at)).U32(xid)
}

// Commit is a Commit message of a commit record at lsn that ends at end.
func Commit(lsn, end pglogrepl.LSN, at time.Time) []byte {
	return Msg{'C'}.U8(0).U64(uint64(lsn)).U64(uint64(end)).U64(pgTime(at))
}

// Truncate is a Truncate message of the relations rels.
func Truncate(cascade bool, rels ...uint32) []byte {
	var opt byte
	if cascade {
		opt = 1
	}
	m := Msg{'T'}.U32(uint32(len(rels))).U8(opt)
	for _, r := range rels {
		m = m.U32(r)
	}
	return m
}

// Message is a logical decoding message (pg_logical_emit_message).
func Message(transactional bool, lsn pglogrepl.LSN, prefix string, content []byte) []byte {
	var f byte
	if transactional {
		f = 1
	}
	return Msg{'M'}.U8(f).U64(uint64(lsn)).Str(prefix).U32(uint32(len(content))).Append(string(content))
}

// XLogData frames a pgoutput message as the walsender sends it, starting
// at WAL position start, with the server's WAL end.
func XLogData(start, walEnd pglogrepl.LSN, data []byte) []byte {
	return append(Msg{pglogrepl.XLogDataByteID}.U64(uint64(start)).U64(uint64(walEnd)).U64(0), data...)
}

// Keepalive is a primary keepalive with the server's WAL end; reply asks
// for a status update at once.
func Keepalive(walEnd pglogrepl.LSN, reply bool) []byte {
	var r byte
	if reply {
		r = 1
	}
	return Msg{pglogrepl.PrimaryKeepaliveMessageByteID}.U64(uint64(walEnd)).U64(0).U8(r)
}
