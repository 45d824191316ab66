package incremental

import "testing"

// A chunk's buffers are reused while a worker reads (newChunk gets back
// what recycle kept, capacity and all), at most cap(free) of them, and
// dropped once the worker has no table left, so a finished snapshot holds
// no chunk memory.
func TestChunkFreeList(t *testing.T) {
	inc := &Handoff{free: make(chan *Chunk, 2), running: true}
	for i := 0; i < 3; i++ {
		inc.Recycle(&Chunk{Buf: make([]byte, 10, 1<<20), Ends: []int{10}, keyBuf: []byte("k"), keyEnds: []int{1}})
	}
	if len(inc.free) != 2 {
		t.Fatalf("the free list holds %d chunks, want its capacity, 2", len(inc.free))
	}
	ch := inc.newChunk()
	if cap(ch.Buf) != 1<<20 || len(ch.Buf) != 0 || len(ch.Ends) != 0 || len(ch.keyBuf) != 0 || len(ch.keyEnds) != 0 {
		t.Fatalf("a reused chunk has buf %d/%d, %d ends, %d key bytes, %d keys: want empty buffers of the old capacity",
			len(ch.Buf), cap(ch.Buf), len(ch.Ends), len(ch.keyBuf), len(ch.keyEnds))
	}
	if ch.Seq != 0 || ch.Table != nil || ch.Done || ch.Discard || ch.last != nil {
		t.Fatalf("a reused chunk kept the old chunk's fields: %+v", ch)
	}
	if inc.take() != nil {
		t.Fatal("take with an empty queue returned a table")
	}
	if len(inc.free) != 0 {
		t.Fatalf("the free list still holds %d chunks after the worker's last table", len(inc.free))
	}
	inc.Recycle(&Chunk{Buf: make([]byte, 0, 1<<20)})
	if len(inc.free) != 0 {
		t.Fatal("a chunk recycled with no worker reading was kept")
	}
	if ch := inc.newChunk(); cap(ch.Buf) != 0 {
		t.Fatal("newChunk with an empty free list reused a buffer")
	}
}

// reserve sizes an empty chunk's buffers for the rows it expects, with a
// little headroom, and leaves buffers that are large enough alone.
func TestChunkReserve(t *testing.T) {
	ch := &Chunk{}
	ch.reserve(1000, 100, 8)
	if cap(ch.Buf) < 100000 || cap(ch.Buf) > 110000 || cap(ch.Ends) < 1000 || cap(ch.keyBuf) < 8000 || cap(ch.keyEnds) < 1000 {
		t.Fatalf("reserve(1000 rows, 100 B, 8 B): buf %d, ends %d, keys %d, key ends %d", cap(ch.Buf), cap(ch.Ends), cap(ch.keyBuf), cap(ch.keyEnds))
	}
	big := make([]byte, 0, 1<<20)
	ch = &Chunk{Buf: big}
	ch.reserve(1000, 100, 8)
	if cap(ch.Buf) != 1<<20 || &ch.Buf[:1][0] != &big[:1][0] {
		t.Fatal("reserve replaced a buffer that was large enough")
	}
	ch = &Chunk{}
	ch.reserve(1000, 0, 0) // a lane's first chunk: no width known yet
	if cap(ch.Buf) != 0 {
		t.Fatal("reserve without a known width allocated")
	}
}
