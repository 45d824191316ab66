package connector

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/pgfeldera/pgfeldera/delivery"
)

// The session's side of the completer: each completion reaches the loop
// as an evComplete event with its batch and step (the ledger takes the
// step into its watermark when the loop applies it), counted on the way;
// a completion without its step under the checkpoint gate is fatal, as
// retrying cannot bring the step back.
func TestStream_CompleterEvents(t *testing.T) {
	c := &Connector{logger: slog.New(slog.NewTextHandler(io.Discard, nil)), observer: nopObserver{}, txns: &delivery.Transactions{}}
	s := &stream{c: c, events: make(chan event, 4)}
	k := s.completer()

	k.Done(&delivery.Flight{ID: 3}, 7)
	k.Emit(delivery.Completion{ID: 3, Step: 7})
	if ev := <-s.events; ev.kind != evComplete || ev.id != 3 || ev.step != 7 || ev.err != nil {
		t.Fatalf("completion of batch 3 at step 7: event %+v", ev)
	}
	if got := c.stats.Batches.Load(); got != 1 {
		t.Fatalf("%d batches counted after one completion", got)
	}

	k.Emit(delivery.Completion{Err: fmt.Errorf("%w: batch 4 on users", delivery.ErrNoStep)})
	if ev := <-s.events; ev.kind != evComplete || !isFatal(ev.err) {
		t.Fatalf("a completion without its step: event %+v, fatal %v; want a fatal evComplete", ev, isFatal(ev.err))
	}
	k.Emit(delivery.Completion{Err: fmt.Errorf("%w: batch 5 not complete", delivery.ErrFelderaUnavailable)})
	if ev := <-s.events; ev.kind != evComplete || ev.err == nil || isFatal(ev.err) {
		t.Fatalf("a completion timeout: event %+v; want an evComplete error the next session retries", ev)
	}
}
