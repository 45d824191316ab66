package decode

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// This file parses pgoutput protocol v1 messages from raw WALData bytes.
// Every read is bounds-checked: a truncated or garbled message is an error,
// never a panic (pglogrepl's parser indexes without checking). Tuple column
// data alias the input buffer; they are valid until the next message.

// Message types of pgoutput protocol v1.
const (
	MsgBegin    = 'B'
	MsgCommit   = 'C'
	MsgOrigin   = 'O'
	MsgRelation = 'R'
	MsgType     = 'Y'
	MsgInsert   = 'I'
	MsgUpdate   = 'U'
	MsgDelete   = 'D'
	MsgTruncate = 'T'
	MsgMessage  = 'M'

	// Messages of streamed (protocol v2+) and two-phase (v3+) transactions.
	// pgfeldera asks for neither.
	MsgStreamStart      = 'S'
	MsgStreamStop       = 'E'
	MsgStreamCommit     = 'c'
	MsgStreamAbort      = 'A'
	MsgStreamPrepare    = 'p'
	MsgBeginPrepare     = 'b'
	MsgPrepare          = 'P'
	MsgCommitPrepared   = 'K'
	MsgRollbackPrepared = 'r'
)

// parseStreamAbort checks a STREAM ABORT: xid and subxid (int32 each),
// then, from protocol v4, the abort LSN and time.
func parseStreamAbort(wal []byte) error {
	if len(wal) < 9 {
		return &ParseError{Msg: MsgStreamAbort, Reason: fmt.Sprintf("%d bytes, want at least 9", len(wal))}
	}
	return nil
}

// Tuple column kinds.
const (
	ColNull           = 'n'
	ColUnchangedToast = 'u'
	ColText           = 't'
	ColBinary         = 'b'
)

// ParseError is a malformed pgoutput message.
type ParseError struct {
	Msg    byte
	Reason string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("pgoutput: malformed %q message: %s", e.Msg, e.Reason)
}

// Fatal says a message that does not parse ends the process (fatal.Is).
func (e *ParseError) Fatal() bool { return true }

type reader struct {
	msg byte
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &ParseError{Msg: r.msg, Reason: fmt.Sprintf(format, args...)}
	}
}

func (r *reader) need(n int, what string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b) < n {
		r.fail("truncated at %s (need %d bytes, have %d)", what, n, len(r.b))
		return false
	}
	return true
}

func (r *reader) u8(what string) byte {
	if !r.need(1, what) {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16(what string) uint16 {
	if !r.need(2, what) {
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) u32(what string) uint32 {
	if !r.need(4, what) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u64(what string) uint64 {
	if !r.need(8, what) {
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) cstring(what string) string {
	if r.err != nil {
		return ""
	}
	for i, c := range r.b {
		if c == 0 {
			s := string(r.b[:i])
			r.b = r.b[i+1:]
			return s
		}
	}
	r.fail("unterminated string at %s", what)
	return ""
}

// Begin is a BEGIN message.
type Begin struct {
	FinalLSN   pglogrepl.LSN // LSN of the commit record
	CommitTime time.Time     // when the transaction committed on the server
	Xid        uint32
}

// Commit is a COMMIT message.
type Commit struct {
	CommitLSN  pglogrepl.LSN // the commit record
	EndLSN     pglogrepl.LSN // first byte after the transaction: what to ack
	CommitTime time.Time     // when the transaction committed on the server
}

// PGEpoch is PostgreSQL's epoch: the protocol's timestamps count
// microseconds from it.
var PGEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// pgTime is a PostgreSQL TimestampTz as the protocol sends it.
func pgTime(us uint64) time.Time {
	return PGEpoch.Add(time.Duration(int64(us)) * time.Microsecond)
}

// Column is a column of a RELATION message.
type Column struct {
	Key     bool // part of the replica identity (flags & 1)
	Name    string
	TypeOID uint32
	TypeMod int32
}

// Relation is a RELATION message: it describes a table as of this point of
// the stream and replaces any earlier description of the same OID.
type Relation struct {
	ID              uint32
	Namespace       string
	Name            string
	ReplicaIdentity byte // 'd' default, 'n' nothing, 'f' full, 'i' index
	Columns         []Column
}

// TypeInfo is a TYPE message: the name of a non-builtin type OID.
type TypeInfo struct {
	OID       uint32
	Namespace string
	Name      string
}

// TupleCol is one column value of a tuple. Data aliases the message.
type TupleCol struct {
	Kind byte // ColNull, ColUnchangedToast, ColText or ColBinary
	Data []byte
}

// Change is an INSERT, UPDATE or DELETE.
type Change struct {
	Op      byte // MsgInsert, MsgUpdate or MsgDelete
	RelID   uint32
	OldKind byte // 0 (no old tuple), 'K' (identity key) or 'O' (old row)
	Old     []TupleCol
	New     []TupleCol
}

// Truncate is a TRUNCATE message.
type Truncate struct {
	Options byte // 1 CASCADE, 2 RESTART IDENTITY
	RelIDs  []uint32
}

// Message is a logical decoding message (pg_logical_emit_message), sent
// only when START_REPLICATION asks for messages 'true'.
type Message struct {
	Transactional bool
	LSN           pglogrepl.LSN
	Prefix        string
	Content       []byte // aliases the WAL buffer: copy to keep it
}

// ParseMessage parses a MESSAGE message: flags, LSN, prefix, content.
func ParseMessage(b []byte) (Message, error) {
	r := reader{msg: MsgMessage, b: b[1:]}
	var m Message
	flags := r.u8("flags")
	if flags&^1 != 0 {
		r.fail("unknown flags %#x", flags)
	}
	m.Transactional = flags&1 == 1
	m.LSN = pglogrepl.LSN(r.u64("LSN"))
	m.Prefix = r.cstring("prefix")
	n := r.u32("content length")
	if r.need(int(n), "content") {
		m.Content = r.b[:n]
		r.b = r.b[n:]
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the content", len(r.b))
	}
	return m, r.err
}

// ParseBegin parses a BEGIN message (type byte included).
func ParseBegin(b []byte) (Begin, error) {
	r := reader{msg: MsgBegin, b: b[1:]}
	m := Begin{FinalLSN: pglogrepl.LSN(r.u64("final LSN"))}
	m.CommitTime = pgTime(r.u64("commit time"))
	m.Xid = r.u32("xid")
	return m, r.err
}

// ParseCommit parses a COMMIT message.
func ParseCommit(b []byte) (Commit, error) {
	r := reader{msg: MsgCommit, b: b[1:]}
	r.u8("flags")
	m := Commit{CommitLSN: pglogrepl.LSN(r.u64("commit LSN")), EndLSN: pglogrepl.LSN(r.u64("end LSN"))}
	m.CommitTime = pgTime(r.u64("commit time"))
	return m, r.err
}

// ParseRelation parses a RELATION message.
func ParseRelation(b []byte) (*Relation, error) {
	r := reader{msg: MsgRelation, b: b[1:]}
	m := &Relation{ID: r.u32("relation OID")}
	m.Namespace = r.cstring("namespace")
	m.Name = r.cstring("relation name")
	m.ReplicaIdentity = r.u8("replica identity")
	n := int(r.u16("column count"))
	if r.err == nil && n > len(r.b)/7 { // each column is at least 7 bytes
		r.fail("column count %d exceeds the message", n)
	}
	if r.err != nil {
		return nil, r.err
	}
	m.Columns = make([]Column, n)
	for i := range m.Columns {
		flags := r.u8("column flags")
		m.Columns[i] = Column{Key: flags&1 == 1, Name: r.cstring("column name"), TypeOID: r.u32("column type"), TypeMod: int32(r.u32("type modifier"))}
	}
	return m, r.err
}

// ParseType parses a TYPE message.
func ParseType(b []byte) (TypeInfo, error) {
	r := reader{msg: MsgType, b: b[1:]}
	m := TypeInfo{OID: r.u32("type OID")}
	m.Namespace = r.cstring("namespace")
	m.Name = r.cstring("type name")
	return m, r.err
}

// ParseChange parses an INSERT, UPDATE or DELETE message. cols is reused
// scratch space for the tuple columns (may be nil).
func ParseChange(b []byte, c *Change) error {
	r := reader{msg: b[0], b: b[1:]}
	c.Op, c.OldKind = b[0], 0
	c.Old, c.New = c.Old[:0], c.New[:0]
	c.RelID = r.u32("relation OID")
	switch c.Op {
	case MsgInsert:
		if k := r.u8("tuple marker"); r.err == nil && k != 'N' {
			r.fail("insert tuple marker %q, want 'N'", k)
		}
		c.New = r.tuple(c.New)
	case MsgUpdate:
		k := r.u8("tuple marker")
		if k == 'K' || k == 'O' {
			c.OldKind = k
			c.Old = r.tuple(c.Old)
			k = r.u8("tuple marker")
		}
		if r.err == nil && k != 'N' {
			r.fail("update tuple marker %q, want 'N'", k)
		}
		c.New = r.tuple(c.New)
	case MsgDelete:
		k := r.u8("tuple marker")
		if r.err == nil && k != 'K' && k != 'O' {
			r.fail("delete tuple marker %q, want 'K' or 'O'", k)
		}
		c.OldKind = k
		c.Old = r.tuple(c.Old)
	default:
		r.fail("not a change message")
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

func (r *reader) tuple(dst []TupleCol) []TupleCol {
	n := int(r.u16("tuple column count"))
	if r.err == nil && n > len(r.b) { // each column is at least 1 byte
		r.fail("tuple column count %d exceeds the message", n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		kind := r.u8("column kind")
		switch kind {
		case ColNull, ColUnchangedToast:
			dst = append(dst, TupleCol{Kind: kind})
		case ColText, ColBinary:
			l := int(int32(r.u32("column length")))
			if !r.need(l, "column data") {
				break
			}
			dst = append(dst, TupleCol{Kind: kind, Data: r.b[:l:l]})
			r.b = r.b[l:]
		default:
			r.fail("unknown column kind %q", kind)
		}
	}
	return dst
}

// ParseTruncate parses a TRUNCATE message.
func ParseTruncate(b []byte) (Truncate, error) {
	r := reader{msg: MsgTruncate, b: b[1:]}
	n := int(r.u32("relation count"))
	m := Truncate{Options: r.u8("options")}
	if r.err == nil && (n < 0 || n > len(r.b)/4) {
		r.fail("relation count %d exceeds the message", n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		m.RelIDs = append(m.RelIDs, r.u32("relation OID"))
	}
	return m, r.err
}
