package snapshot

import (
	"bufio"
	"bytes"
	"fmt"
	"os"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// A Spool holds the rows of one ad-hoc query in a file beside the state
// file. A retraction reads Feldera's answer whole first, then deletes in
// batches that wait for completion: never inside the query's answer,
// whose idle timer (FELDERA_REQUEST_TIMEOUT) would end it while a batch
// waits for a slow step. Memory stays bounded by a line.
type Spool struct {
	f    *os.File
	w    *bufio.Writer
	Rows int
}

// NewSpool spools into f, a new file the spool removes when closed.
func NewSpool(f *os.File) *Spool { return &Spool{f: f, w: bufio.NewWriter(f)} }

// Name is the spool file's name.
func (sp *Spool) Name() string { return sp.f.Name() }

// Add appends one row, a line.
func (sp *Spool) Add(row []byte) error {
	sp.Rows++
	sp.w.Write(bytes.TrimSpace(row))
	return sp.w.WriteByte('\n')
}

// Flush writes what was added to the file.
func (sp *Spool) Flush() error { return sp.w.Flush() }

// Rewind makes the file readable from its first row (after Flush).
func (sp *Spool) Rewind() error {
	_, err := sp.f.Seek(0, 0)
	return err
}

// Each calls fn with every spooled row, in order; fn may keep it.
func (sp *Spool) Each(fn func(row []byte) error) error {
	sc := bufio.NewScanner(sp.f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if err := fn(append([]byte(nil), sc.Bytes()...)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fatal.Wrap(fmt.Errorf("spool file %s: %w", sp.f.Name(), err))
	}
	return nil
}

// Close removes the spool file.
func (sp *Spool) Close() {
	sp.f.Close()
	os.Remove(sp.f.Name())
}
