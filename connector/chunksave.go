package connector

import (
	"slices"

	"github.com/pgfeldera/pgfeldera/incremental"
)

// saveChunks records in the state each chunk the acknowledged position
// passed (incremental.Recorder), and forgets the tables read whole.
func (s *stream) saveChunks(force bool) error {
	inc := s.inc
	read, err := inc.rec.Save(inc.loop.Due(s.c.acked), force)
	for _, ct := range read {
		inc.tables = slices.DeleteFunc(inc.tables, func(x *incremental.Table) bool { return x == ct })
	}
	return err
}

// writeChunks writes the state file (incremental.Recorder.Write).
func (s *stream) writeChunks() error { return s.inc.rec.Write() }
