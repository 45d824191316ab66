package delivery

import (
	"testing"
	"time"
)

// A batch is full at BATCH_MAX_ROWS rows, or at BATCH_MAX_BYTES bytes
// once it holds a row: a row larger than the byte bound goes alone.
func TestBounds_Full(t *testing.T) {
	l := Bounds{Rows: 3, Bytes: 10}
	for _, tc := range []struct {
		lines []string
		want  bool
	}{
		{nil, false},
		{[]string{"{}\n"}, false},
		{[]string{"{}\n", "{}\n", "{}\n"}, true},
		{[]string{"{\"a\":12345}\n"}, true},
		{[]string{"{}\n", "{\"a\":1}\n"}, true},
	} {
		b := NewBatch(1)
		for _, line := range tc.lines {
			b.Bufs[0] = append(b.Bufs[0], line...)
			b.Added(0, 1, time.Now())
		}
		if got := l.Full(b); got != tc.want {
			t.Errorf("Full(%q) = %v, want %v", tc.lines, got, tc.want)
		}
	}
}

// Reset empties a batch for reuse and keeps its buffers' capacity;
// Shrink drops only the buffers grown past the limit.
func TestBatch_ResetShrink(t *testing.T) {
	b := NewBatch(2)
	at := time.Unix(100, 0)
	b.Bufs[0] = append(b.Bufs[0], "{}\n{}\n"...)
	b.Added(0, 2, at)
	b.Bufs[1] = append(b.Bufs[1], make([]byte, 100)...)
	b.Added(1, 1, at.Add(time.Second))
	b.AckTo, b.Multi, b.SealNow = 5, true, true
	if b.Total != 3 || b.Tables() != 2 || b.Size() != 106 || !b.First.Equal(at) {
		t.Fatalf("total %d, tables %d, size %d, first %v", b.Total, b.Tables(), b.Size(), b.First)
	}
	b.Reset(7)
	if b.Total != 0 || b.Size() != 0 || b.Tables() != 0 || b.Seq != 7 || b.AckTo != 0 || b.Multi || b.SealNow || !b.First.IsZero() || cap(b.Bufs[1]) < 100 {
		t.Fatalf("after Reset: %+v", b)
	}
	b.Shrink(50)
	if b.Bufs[1] != nil || b.Bufs[0] == nil {
		t.Fatalf("Shrink(50) kept caps %d, %d", cap(b.Bufs[0]), cap(b.Bufs[1]))
	}
}
