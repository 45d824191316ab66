package felderatest

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/circuit"
)

// Fault is an injected failure for requests whose path contains Path
// ("ingress", "completion_status", "query", or "" for every request).
type Fault struct {
	Kind   FaultKind
	Path   string
	Status int    // FailStatus: default 503
	Code   string // FailStatus: default "PipelineUnavailable"
	Count  int    // how many requests it hits; <= 0 means until ClearFaults
}

// InjectFault adds a fault; faults are matched in the order added.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Kind == FailStatus && f.Status == 0 {
		f.Status = http.StatusServiceUnavailable
	}
	if f.Kind == FailStatus && f.Code == "" {
		f.Code = "PipelineUnavailable"
	}
	s.faults = append(s.faults, &f)
}

// ClearFaults removes every fault and releases hanging requests.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
	close(s.unblock)
	s.unblock = make(chan struct{})
}

type lateKey struct{}

// fault applies the first matching injected fault; done means the request
// was answered (or dropped) by it, late that it is a HangThenApply request
// released after its client gave up.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, rest string) (done, late bool) {
	f, unblock := s.matchFault(rest)
	if f == nil {
		return false, false
	}
	switch f.Kind {
	case FailStatus:
		io.Copy(io.Discard, r.Body)
		writeError(w, f.Status, f.Code, "injected fault: "+f.Code, nil)
	case Hang:
		return s.hang(r, unblock), false
	case Drop:
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("felderatest: connection cannot be hijacked")
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
	case HangThenApply:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return true, false
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.holding(1)
		s.holdRequest(r, true)
		<-unblock
		s.holdRequest(r, false)
		s.holding(-1)
		return false, r.Context().Err() != nil
	case PartialThen503:
		if !strings.HasPrefix(rest, "/ingress/") {
			return false, false
		}
		s.ingressPartial(w, r, strings.TrimPrefix(rest, "/ingress/"))
	}
	return true, false
}

// matchFault finds the first injected fault that hits a request for rest
// and counts it; unblock is the channel that releases held requests.
func (s *Server) matchFault(rest string) (f *Fault, unblock chan struct{}) {
	s.mu.Lock()
	for i, c := range s.faults {
		if c.Path == "" || strings.Contains(rest, c.Path) {
			f = c
			if f.Count > 0 {
				if f.Count--; f.Count == 0 {
					s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
				}
			}
			break
		}
	}
	unblock = s.unblock
	if f != nil {
		s.served[f.Kind]++
	}
	s.mu.Unlock()
	return f, unblock
}

// hang holds a request until unblock is closed or its client gives up;
// done means the request needs no more handling.
func (s *Server) hang(r *http.Request, unblock chan struct{}) (done bool) {
	// Read the body first: net/http notices a client that went away
	// only once the body was consumed.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return true
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.holding(1)
	defer s.holding(-1)
	select {
	case <-unblock:
		// A request whose client gave up is not processed late: the
		// manager drops a forwarded request when its client leaves.
		// (HangThenApply is the other behaviour.)
		return r.Context().Err() != nil
	case <-r.Context().Done():
	}
	return true
}

// holdRequest records (or forgets) a HangThenApply request while it is held.
func (s *Server) holdRequest(r *http.Request, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.heldReqs == nil {
		s.heldReqs = map[*http.Request]bool{}
	}
	if on {
		s.heldReqs[r] = true
	} else {
		delete(s.heldReqs, r)
	}
}

// HeldAbandoned is how many HangThenApply requests held now the server
// has seen their client give up on: released, each applies late. A
// client's going is seen a moment after it closed its connection, so a
// test that needs a late request waits for this, not for the client's
// own account of it.
func (s *Server) HeldAbandoned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for r := range s.heldReqs {
		if r.Context().Err() != nil {
			n++
		}
	}
	return n
}

func (s *Server) holding(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held += d
}

// Served is how many requests a fault of kind k has hit.
func (s *Server) Served(k FaultKind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[k]
}

// Held is how many requests a Hang or HangThenApply fault holds now.
func (s *Server) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// lateMark is a late request's place in its endpoint: it is applied once
// the endpoint's completed records reach upTo, the rule of its completion
// token. Feldera shows a request's records, and completes its token, only
// when a step that fed them ends with no transaction in progress
// (crates/adapters/src/controller.rs, CircuitThread::step; see
// internal/circuit), not when the HTTP input queues them (http/input.rs,
// complete_request).
type lateMark struct {
	ep   *circuit.Endpoint
	upTo uint64
}

// LateApplied is how many HangThenApply requests were applied after their
// client had given up (the late duplicates a fence must outwait): their
// records processed by a step and visible, not only queued, so a test
// that reads the tables next sees them.
func (s *Server) LateApplied() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Advance(time.Now())
	n := 0
	for _, m := range s.late {
		if m.ep.Completed >= m.upTo {
			n++
		}
	}
	return n
}
