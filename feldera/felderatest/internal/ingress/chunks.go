package ingress

import (
	"bytes"
	"io"
)

// ReadChunks reads body size bytes at a time and calls fn with the whole
// records read so far (up to the last newline; at the end, the rest).
// fn may keep the chunk.
func ReadChunks(body io.Reader, size int, fn func([]byte) error) error {
	buf := make([]byte, size)
	var pending []byte
	for {
		n, err := io.ReadFull(body, buf)
		pending = append(pending, buf[:n]...)
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return err
		}
		cut := len(pending)
		if !eof {
			cut = bytes.LastIndexByte(pending, '\n') + 1
		}
		if cut > 0 {
			if err := fn(append([]byte(nil), pending[:cut]...)); err != nil {
				return err
			}
			pending = append(pending[:0], pending[cut:]...)
		}
		if eof {
			return nil
		}
	}
}
