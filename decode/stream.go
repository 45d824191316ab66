package decode

import (
	"fmt"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
)

// Kind is what a decoded message means to the connector.
type Kind int

const (
	KindOther    Kind = iota // origin, logical message: nothing to do
	KindBegin                // a transaction starts
	KindCommit               // a transaction ends: Commit.EndLSN may be acked once its rows are complete
	KindRelation             // the relation cache changed; Warnings may say something
	KindRows                 // Rows lines were appended to Route's buffer
	KindTruncate             // Truncated tables must be retracted
	KindMessage              // a logical message (pg_logical_emit_message): Message
)

// Event is the result of decoding one message.
type Event struct {
	Kind      Kind
	Begin     Begin
	Commit    Commit
	Route     int
	Rows      int // lines appended
	Deletes   int // of which deletes
	Rel       *Rel
	Truncated []*Rel
	Cascade   bool
	Warnings  []string
	Message   Message
	// Keys are the Feldera keys (Rel.KeyText) of the rows a KindRows
	// event changed (an update's old and new key, a delete's old), set
	// only for a route the decoder's WantKeys marks; KeyUnknown says one
	// of them could not be known (a NULL or unchanged TOAST key column).
	Keys       []string
	KeyUnknown bool
}

// Buffers gives the decoder the NDJSON buffer of a route to append to.
type Buffers interface {
	Buffer(route int) *[]byte
}

// Decoder decodes a pgoutput stream. It holds the relation cache; it is not
// safe for concurrent use.
type Decoder struct {
	targets  map[string]*Target
	rels     map[uint32]*Rel
	byTarget map[*Target]*Rel  // the last plan per target, to see a column vanish mid-stream
	unmapped map[uint32]string // RELATIONs of tables TABLES does not map, by OID
	types    map[uint32]string
	change   Change
	// RequirePrimaryKey refuses Feldera tables without a PRIMARY KEY.
	RequirePrimaryKey bool
	// Options plan each RELATION; Types is consulted after the stream's
	// own TYPE messages.
	Options Options
	// WantKeys, indexed by route, asks for the Feldera keys of the rows
	// each change touches (Event.Keys): the routes an incremental
	// snapshot's window is open on. Nil asks for none.
	WantKeys []bool
}

// NewDecoder returns a decoder for the mapped targets.
func NewDecoder(targets []*Target) *Decoder {
	d := &Decoder{targets: map[string]*Target{}, rels: map[uint32]*Rel{}, byTarget: map[*Target]*Rel{}, unmapped: map[uint32]string{}, types: map[uint32]string{}, RequirePrimaryKey: true}
	for _, t := range targets {
		d.targets[t.Qualified()] = t
	}
	return d
}

// lookup resolves a type for planning: the catalog first, then the name
// a TYPE message gave (enough for a refusal to name it).
func (d *Decoder) lookup(oid uint32) (pgvalue.PGType, bool) {
	if d.Options.Types != nil {
		if t, ok := d.Options.Types(oid); ok {
			return t, true
		}
	}
	if n, ok := d.types[oid]; ok {
		return pgvalue.PGType{OID: oid, Name: n}, true
	}
	return pgvalue.PGType{}, false
}

// Decode decodes one WALData payload. Row events append whole NDJSON lines
// to the route's buffer; on error the buffer is restored to its length
// before the message.
func (d *Decoder) Decode(wal []byte, bufs Buffers, ev *Event) (err error) {
	*ev = Event{}
	if len(wal) == 0 {
		return &ParseError{Reason: "empty message"}
	}
	switch wal[0] {
	case MsgBegin:
		ev.Kind = KindBegin
		ev.Begin, err = ParseBegin(wal)
	case MsgCommit:
		ev.Kind = KindCommit
		ev.Commit, err = ParseCommit(wal)
	case MsgRelation:
		ev.Kind = KindRelation
		err = d.relation(wal, ev)
	case MsgType:
		var ti TypeInfo
		if ti, err = ParseType(wal); err == nil {
			d.types[ti.OID] = ti.Namespace + "." + ti.Name
		}
	case MsgInsert, MsgUpdate, MsgDelete:
		err = d.rows(wal, bufs, ev)
	case MsgTruncate:
		err = d.truncate(wal, ev)
	case MsgMessage:
		ev.Kind = KindMessage
		ev.Message, err = ParseMessage(wal)
	case MsgOrigin:
	case MsgStreamAbort:
		// PostgreSQL 18 was seen sending STREAM ABORT for an aborted
		// subtransaction on protocol v1, which never streams: nothing of it
		// was sent, so there is nothing to undo. Parsed, then ignored.
		err = parseStreamAbort(wal)
	case MsgStreamStart, MsgStreamStop, MsgStreamCommit, MsgStreamPrepare, MsgBeginPrepare, MsgPrepare, MsgCommitPrepared, MsgRollbackPrepared:
		err = &RefusalError{Reason: fmt.Sprintf("pgoutput sent a %q message (a streamed or two-phase transaction), which protocol v1 without streaming never requests: refusing rather than guessing what it means", wal[0])}
	default:
		err = &ParseError{Msg: wal[0], Reason: "unknown message type"}
	}
	return err
}

func (d *Decoder) relation(wal []byte, ev *Event) error {
	m, err := ParseRelation(wal)
	if err != nil {
		return err
	}
	qualified := m.Namespace + "." + m.Name
	t, ok := d.targets[qualified]
	if !ok {
		// Not refused yet: with publish_via_partition_root, a change to a
		// leaf partition is preceded by the RELATION of the root it is
		// published as and then of the leaf itself, though its rows carry
		// the root's OID. Only a change to an unmapped table is refused.
		delete(d.rels, m.ID)
		d.unmapped[m.ID] = qualified
		return nil
	}
	delete(d.unmapped, m.ID)
	if d.RequirePrimaryKey && len(t.Dest.PrimaryKey) == 0 {
		return &RefusalError{Table: qualified, Reason: fmt.Sprintf("Feldera table %s has no PRIMARY KEY (replays would duplicate rows; FELDERA_REQUIRE_PRIMARY_KEY=false to allow)", t.Dest.Name)}
	}
	opts := d.Options
	opts.Types = d.lookup
	rel, warnings, err := NewRel(m.ID, t, m.ReplicaIdentity, m.Columns, &opts, d.byTarget[t])
	if err != nil {
		return err
	}
	d.rels[m.ID] = rel // replaces the cached relation (ALTER TABLE mid-stream)
	d.byTarget[t] = rel
	ev.Rel, ev.Warnings = rel, warnings
	return nil
}

func (d *Decoder) rel(id uint32) (*Rel, error) {
	r, ok := d.rels[id]
	if !ok && d.unmapped[id] != "" {
		return nil, &RefusalError{Table: d.unmapped[id], Reason: "the publication sends changes to this table but TABLES does not map it (add it to TABLES or remove it from the publication)"}
	}
	if !ok {
		return nil, &RefusalError{Reason: fmt.Sprintf("change for relation OID %d before its RELATION message", id)}
	}
	return r, nil
}

func (d *Decoder) rows(wal []byte, bufs Buffers, ev *Event) error {
	c := &d.change
	if err := ParseChange(wal, c); err != nil {
		return err
	}
	r, err := d.rel(c.RelID)
	if err != nil {
		return err
	}
	buf := bufs.Buffer(r.Target.Route)
	mark := len(*buf)
	dst := *buf
	ev.Kind, ev.Route, ev.Rel = KindRows, r.Target.Route, r
	switch c.Op {
	case MsgInsert:
		dst, err = r.appendRow(dst, "insert", c.New, nil, false)
		ev.Rows = 1
	case MsgUpdate:
		var old []TupleCol
		if c.OldKind == 0 && !r.Keyed() {
			// Under a FULL replica identity every UPDATE carries its old
			// row: this one's source (a partition under a root that is
			// FULL, say) is not FULL, and the old row cannot be retracted.
			err = &RefusalError{Table: r.Target.Qualified(), Reason: "an UPDATE arrived without its old row, so it cannot be retracted from keyless Feldera table " + r.Target.Dest.Name + ": the table it came from is not REPLICA IDENTITY FULL (a partition keeps its own replica identity: set it on each)"}
			break
		}
		if c.OldKind != 0 {
			// The key may have changed: retract the old key, insert the new row.
			if err = r.checkRetraction(c.OldKind, c.Old); err == nil {
				dst, err = r.appendRow(dst, "delete", c.Old, nil, r.Keyed())
				ev.Rows, ev.Deletes = 1, 1
			}
			if c.OldKind == 'O' {
				old = c.Old
			}
		}
		if err == nil {
			dst, err = r.appendRow(dst, "insert", c.New, old, false)
			ev.Rows++
		}
	case MsgDelete:
		if err = r.checkRetraction(c.OldKind, c.Old); err == nil {
			dst, err = r.appendRow(dst, "delete", c.Old, nil, r.Keyed())
			ev.Rows, ev.Deletes = 1, 1
		}
	}
	if err != nil {
		*buf = dst[:mark]
		return err
	}
	*buf = dst
	if r.Target.Route < len(d.WantKeys) && d.WantKeys[r.Target.Route] {
		d.keys(r, c, ev)
	}
	return nil
}

// keys fills ev.Keys with the Feldera keys c touches: the old key of an
// update that carries one and of a delete, and the new key of an insert
// or update (an update without an old tuple kept its key).
func (d *Decoder) keys(r *Rel, c *Change, ev *Event) {
	add := func(tup []TupleCol) {
		k, ok := r.KeyText(tup)
		if !ok {
			ev.KeyUnknown = true
			return
		}
		ev.Keys = append(ev.Keys, k)
	}
	if c.Op != MsgInsert && c.OldKind != 0 {
		add(c.Old)
	}
	if c.Op != MsgDelete {
		add(c.New)
	}
}

func (d *Decoder) truncate(wal []byte, ev *Event) error {
	m, err := ParseTruncate(wal)
	if err != nil {
		return err
	}
	ev.Kind, ev.Cascade = KindTruncate, m.Options&1 == 1
	for _, id := range m.RelIDs {
		r, err := d.rel(id)
		if err != nil {
			return err
		}
		ev.Truncated = append(ev.Truncated, r)
	}
	return nil
}
