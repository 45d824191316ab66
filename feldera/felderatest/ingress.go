package felderatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/circuit"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/ingress"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// ---- ingress ----

// lookupTable finds the table a path segment names; raw is the segment
// as sent, unescaped: Feldera names the endpoint after it, quotes and all
// (server.rs, input_endpoint).
func (s *Server) lookupTable(w http.ResponseWriter, escaped string) (t *table.Table, canon, raw string, ok bool) {
	raw, err := url.PathUnescape(escaped)
	if err != nil {
		writeError(w, 400, "InvalidParam", "bad table name", nil)
		return nil, "", "", false
	}
	canon = feldera.TableIdent(raw)
	s.mu.Lock()
	t, ok = s.tables[canon]
	s.mu.Unlock()
	if !ok {
		ep := raw + ".api-ingress-0000000000000000"
		writeError(w, http.StatusNotFound, "ConfigError.UnknownInputStream",
			fmt.Sprintf("invalid controller configuration: Input endpoint '%s' specifies unknown table '%s'", ep, canon),
			map[string]any{"config_error": map[string]any{"endpoint_name": ep, "stream_name": canon}})
		return nil, "", "", false
	}
	return t, canon, raw, true
}

// waitRunning blocks while the pipeline is paused, up to IngressTimeout.
func (s *Server) waitRunning(w http.ResponseWriter, r *http.Request, force bool) bool {
	deadline := time.NewTimer(s.cfg.IngressTimeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		status, unblock := s.status, s.unblock
		s.mu.Unlock()
		if status == "Running" || force {
			return true
		}
		select {
		case <-unblock:
		case <-deadline.C:
			s.unreachable(w)
			return false
		case <-r.Context().Done():
			return false
		}
	}
}

// unreachable is the manager's answer to an ingress request the pipeline
// held past its forward timeout.
func (s *Server) unreachable(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, "PipelineInteractionUnreachable",
		fmt.Sprintf("Pipeline %s is unreachable: timeout (%ds) was reached", s.cfg.Pipeline, int(s.cfg.IngressTimeout.Seconds())),
		map[string]any{"pipeline_name": s.cfg.Pipeline, "request": "ingress", "error": "timeout"})
}

func (s *Server) ingress(w http.ResponseWriter, r *http.Request, escaped string) {
	s.ingressWith(w, r, escaped, false)
}

func (s *Server) ingressPartial(w http.ResponseWriter, r *http.Request, escaped string) {
	s.ingressWith(w, r, escaped, true)
}

// intake is one ingress request as it is read.
type intake struct {
	t      *table.Table
	canon  string
	args   ingress.Args
	ep     *circuit.Endpoint
	seq    int
	events int // parsed so far (parse errors number them across chunks)
	req    Request
	perrs  []ingress.ParseError
}

// ingressWith reads a request body the way Feldera's HTTP input does
// (http/input.rs, complete_request): read by read, each read split at
// record boundaries, parsed and queued at once, so steps run between the
// reads of one request and a view can see a prefix of it. While the
// endpoint's queue is full it stops reading. The answer comes once the
// whole body was read: the token covers all of it.
func (s *Server) ingressWith(w http.ResponseWriter, r *http.Request, escaped string, partial bool) {
	t, canon, raw, ok := s.lookupTable(w, escaped)
	if !ok {
		return
	}
	args, st, code, msg := ingress.ParseArgs(r.URL.Query())
	if st != 0 {
		writeError(w, st, "ConfigError."+code, msg, nil)
		return
	}
	if !s.waitRunning(w, r, r.URL.Query().Get("force") == "true") {
		return
	}
	in := &intake{t: t, canon: canon, args: args, req: Request{Time: time.Now(), Table: canon}}
	s.mu.Lock()
	in.ep = s.endpointFor(raw, t, args.EndpointKey)
	s.requestSeq++
	in.seq = s.requestSeq
	s.mu.Unlock()
	body := io.Reader(r.Body)
	if partial || s.cfg.CountOnly && s.cfg.OnIngress != nil {
		whole, err := io.ReadAll(r.Body)
		if err != nil {
			return // client went away mid-body
		}
		if partial {
			whole = ingress.FirstHalf(t, whole, args)
		}
		if s.cfg.OnIngress != nil {
			s.cfg.OnIngress(canon, whole, time.Now())
		}
		body = bytes.NewReader(whole)
	}
	full := false
	err := ingress.ReadChunks(body, s.cfg.ReadBytes, func(chunk []byte) error {
		if !s.roomFor(r, in.ep) {
			full = true
			return errFull
		}
		s.take(in, chunk)
		return nil
	})
	if err != nil && !full {
		return // client went away mid-body
	}
	s.answer(w, r, in, partial || full)
}

// answer logs an ingress request that was read (unreachable: its body
// was not all taken, PartialThen503 or a queue full past the forward
// timeout) and answers it: with a token that covers all of it, its parse
// errors, or the manager's 503.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, in *intake, unreachable bool) {
	s.mu.Lock()
	tok := circuit.Token(s.incarnation, in.ep, s.cfg.PaddedTokens)
	in.req.Errors = len(in.perrs)
	switch {
	case unreachable:
		in.req.Status = http.StatusServiceUnavailable
	case len(in.perrs) > 0:
		in.req.Status = http.StatusBadRequest
	default:
		in.req.Status = http.StatusOK
	}
	if late, _ := r.Context().Value(lateKey{}).(bool); late {
		s.late = append(s.late, lateMark{ep: in.ep, upTo: in.ep.Queued})
		in.req.Late = true
	}
	if !s.cfg.CountOnly {
		s.requests = append(s.requests, in.req)
	}
	s.mu.Unlock()
	switch {
	case unreachable:
		s.unreachable(w)
	case len(in.perrs) > 0:
		writeParseErrors(w, in.perrs)
	default:
		writeJSON(w, 200, map[string]string{"token": tok})
	}
}

var errFull = fmt.Errorf("felderatest: ingress queue full past the forward timeout")

// take parses one chunk of a request and queues it for a step.
func (s *Server) take(in *intake, chunk []byte) {
	b := &circuit.Buffer{EP: in.ep, Req: in.seq, Bytes: len(chunk)}
	lines := 0
	for _, l := range bytes.Split(chunk, []byte{'\n'}) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines++
		}
	}
	in.req.Lines += lines
	in.req.Bytes += len(chunk)
	if s.cfg.CountOnly {
		b.Records = lines
	} else {
		var perrs []ingress.ParseError
		b.Ops, perrs, in.events = ingress.ParseBody(in.t, chunk, in.args, in.events)
		in.perrs = append(in.perrs, perrs...)
		b.Records = len(b.Ops)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.CountOnly {
		s.countOnly[in.canon] += lines
	}
	s.noteOps(in, b.Ops)
	s.c.QueueBuffer(b, time.Now())
}

// noteOps counts a chunk's commands into its request's log entry and,
// for a keyed table, its inserts per key.
func (s *Server) noteOps(in *intake, ops []table.Op) {
	t := in.t
	var ki map[string]int
	if t.Keyed() && len(ops) > 0 {
		if ki = s.keyInserts[in.canon]; ki == nil {
			ki = map[string]int{}
			s.keyInserts[in.canon] = ki
		}
	}
	for _, o := range ops {
		switch o.Kind {
		case 'i':
			in.req.Inserts++
			if ki != nil {
				k := t.KeyText(o.Row)
				ki[k]++
				in.req.InsertKeys = append(in.req.InsertKeys, k)
			}
		case 'd':
			in.req.Deletes++
			if ki != nil {
				in.req.DeleteKeys = append(in.req.DeleteKeys, t.KeyText(o.Row))
			}
		case 'u':
			in.req.Updates++
		}
	}
}

// roomFor waits while ep queues Config.MaxQueuedRecords records: the
// endpoint stops reading the body until a step takes some (DURABILITY.md
// §4). It reports false when the wait outlasted IngressTimeout (the
// manager's forward timeout; what was read stays queued) or the client
// left.
func (s *Server) roomFor(r *http.Request, ep *circuit.Endpoint) bool {
	start, full := time.Now(), false
	for {
		s.mu.Lock()
		now := time.Now()
		s.c.Advance(now)
		n, _ := s.c.Buffered(ep)
		if n >= s.cfg.MaxQueuedRecords && !full {
			full = true
			s.pushedBack++
		}
		wake := now.Add(5 * time.Millisecond)
		if end, ok := s.c.StepEnd(); ok && end.Before(wake) {
			wake = end
		}
		s.mu.Unlock()
		if n < s.cfg.MaxQueuedRecords {
			return true
		}
		if now.Sub(start) >= s.cfg.IngressTimeout {
			return false
		}
		select {
		case <-r.Context().Done():
			return false
		case <-time.After(time.Until(wake) + 100*time.Microsecond):
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeParseErrors(w http.ResponseWriter, perrs []ingress.ParseError) {
	var b strings.Builder
	fmt.Fprintf(&b, "Errors parsing input data (%d errors):", len(perrs))
	for _, e := range perrs {
		fmt.Fprintf(&b, "\n    Parse error (event #%d): %s", e.EventNumber, e.Description)
	}
	listed := perrs
	if len(listed) > 1000 {
		listed = listed[:1000]
	}
	writeError(w, http.StatusBadRequest, feldera.CodeParseErrors, b.String(), map[string]any{"num_errors": len(perrs), "errors": listed})
}
