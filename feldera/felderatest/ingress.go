package felderatest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/jsonscan"
)

// ---- ingress ----

type ingressArgs struct {
	array        bool
	raw          bool
	endpointKey  string
	formatIsJSON bool
}

func parseIngressArgs(q url.Values) (ingressArgs, int, string, string) {
	var a ingressArgs
	boolParam := func(name string) (bool, bool) {
		v := q.Get(name)
		switch v {
		case "", "false":
			return false, true
		case "true":
			return true, true
		}
		return false, false
	}
	var ok bool
	if a.array, ok = boolParam("array"); !ok {
		return a, 400, "ParserConfigParseError", fmt.Sprintf("error parsing format configuration: array: invalid value %q, expected true or false", q.Get("array"))
	}
	if _, ok = boolParam("force"); !ok {
		return a, 400, "ParserConfigParseError", fmt.Sprintf("error parsing format configuration: force: invalid value %q, expected true or false", q.Get("force"))
	}
	switch f := q.Get("format"); f {
	case "json":
		a.formatIsJSON = true
	case "", "csv":
	default:
		return a, 400, "UnknownInputFormat", fmt.Sprintf("unknown input format '%s'", f)
	}
	switch u := q.Get("update_format"); u {
	case "", "insert_delete":
	case "raw":
		a.raw = true
	case "weighted", "debezium":
		return a, 400, "ParserConfigParseError", "felderatest: update_format=" + u + " is not supported by the double"
	default:
		return a, 400, "ParserConfigParseError", fmt.Sprintf("error parsing format configuration: unknown variant `%s`", u)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k+"="+q.Get(k))
	}
	sort.Strings(keys)
	a.endpointKey = strings.Join(keys, "&")
	return a, 0, "", ""
}

type parseError struct {
	Description string  `json:"description"`
	EventNumber int     `json:"event_number"`
	Field       *string `json:"field"`
	InvalidText *string `json:"invalid_text"`
}

// lookupTable finds the table a path segment names; raw is the segment
// as sent, unescaped: Feldera names the endpoint after it, quotes and all
// (server.rs, input_endpoint).
func (s *Server) lookupTable(w http.ResponseWriter, escaped string) (t *table, canon, raw string, ok bool) {
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
	t      *table
	canon  string
	args   ingressArgs
	ep     *endpoint
	seq    int
	events int // parsed so far (parse errors number them across chunks)
	req    Request
	perrs  []parseError
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
	args, st, code, msg := parseIngressArgs(r.URL.Query())
	if st != 0 {
		writeError(w, st, "ConfigError."+code, msg, nil)
		return
	}
	if !s.waitRunning(w, r, r.URL.Query().Get("force") == "true") {
		return
	}
	in := &intake{t: t, canon: canon, args: args, req: Request{Time: time.Now(), Table: canon}}
	s.mu.Lock()
	in.ep = s.endpointFor(raw, t, args.endpointKey)
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
			whole = firstHalf(t, whole, args)
		}
		if s.cfg.OnIngress != nil {
			s.cfg.OnIngress(canon, whole, time.Now())
		}
		body = bytes.NewReader(whole)
	}
	full := false
	err := readChunks(body, s.cfg.ReadBytes, func(chunk []byte) error {
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
	s.mu.Lock()
	tok := s.token(in.ep)
	in.req.Errors = len(in.perrs)
	switch {
	case partial || full:
		in.req.Status = http.StatusServiceUnavailable
	case len(in.perrs) > 0:
		in.req.Status = http.StatusBadRequest
	default:
		in.req.Status = http.StatusOK
	}
	if late, _ := r.Context().Value(lateKey{}).(bool); late {
		s.late = append(s.late, lateMark{ep: in.ep, upTo: in.ep.queued})
		in.req.Late = true
	}
	if !s.cfg.CountOnly {
		s.requests = append(s.requests, in.req)
	}
	s.mu.Unlock()
	switch {
	case partial || full:
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
	b := &buffer{ep: in.ep, req: in.seq, bytes: len(chunk)}
	lines := 0
	for _, l := range bytes.Split(chunk, []byte{'\n'}) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines++
		}
	}
	in.req.Lines += lines
	in.req.Bytes += len(chunk)
	if s.cfg.CountOnly {
		b.records = lines
	} else {
		var perrs []parseError
		b.ops, perrs, in.events = parseBody(in.t, chunk, in.args, in.events)
		in.perrs = append(in.perrs, perrs...)
		b.records = len(b.ops)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.CountOnly {
		s.countOnly[in.canon] += lines
	}
	s.noteOps(in, b.ops)
	s.queueBuffer(b, time.Now())
}

// noteOps counts a chunk's commands into its request's log entry and,
// for a keyed table, its inserts per key.
func (s *Server) noteOps(in *intake, ops []op) {
	t := in.t
	var ki map[string]int
	if t.keyed() && len(ops) > 0 {
		if ki = s.keyInserts[in.canon]; ki == nil {
			ki = map[string]int{}
			s.keyInserts[in.canon] = ki
		}
	}
	for _, o := range ops {
		switch o.kind {
		case 'i':
			in.req.Inserts++
			if ki != nil {
				k := keyText(o.row, t.pk)
				ki[k]++
				in.req.InsertKeys = append(in.req.InsertKeys, k)
			}
		case 'd':
			in.req.Deletes++
			if ki != nil {
				in.req.DeleteKeys = append(in.req.DeleteKeys, keyText(o.row, t.pk))
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
func (s *Server) roomFor(r *http.Request, ep *endpoint) bool {
	start, full := time.Now(), false
	for {
		s.mu.Lock()
		now := time.Now()
		s.advance(now)
		n, _ := s.buffered(ep)
		if n >= s.cfg.MaxQueuedRecords && !full {
			full = true
			s.pushedBack++
		}
		wake := now.Add(5 * time.Millisecond)
		if s.cur != nil && s.cur.end.Before(wake) {
			wake = s.cur.end
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

// readChunks reads body size bytes at a time and calls fn with the whole
// records read so far (up to the last newline; at the end, the rest).
// fn may keep the chunk.
func readChunks(body io.Reader, size int, fn func([]byte) error) error {
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

// firstHalf keeps the lines of body that hold the first half of its good
// events (PartialThen503).
func firstHalf(t *table, body []byte, args ingressArgs) []byte {
	ops, _, _ := parseBody(t, body, args, 0)
	keep := len(ops) / 2
	var out []byte
	for _, line := range bytes.SplitAfter(body, []byte{'\n'}) {
		if keep == 0 {
			break
		}
		o, _, _ := parseBody(t, line, args, 0)
		if len(o) > keep {
			break
		}
		keep -= len(o)
		out = append(out, line...)
	}
	return out
}

func writeParseErrors(w http.ResponseWriter, perrs []parseError) {
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

// countLines counts newlines while streaming the body through a small buffer.
func countLines(r io.Reader) (int, error) {
	buf := make([]byte, 32<<10)
	n := 0
	for {
		k, err := r.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// endpointFor finds or creates the endpoint of a path segment (as sent)
// and query: Feldera hashes the two into the endpoint's name, so `users`,
// `USERS` and `"users"` are three endpoints of one table.
func (s *Server) endpointFor(raw string, t *table, key string) *endpoint {
	k := raw + "?" + key
	ep, ok := s.endpoints[k]
	if !ok {
		s.nextEndpoint++
		ep = &endpoint{id: s.nextEndpoint, table: t, name: fmt.Sprintf("%s.api-ingress-%016x", raw, s.nextEndpoint)}
		s.endpoints[k] = ep
		s.endpointByID[ep.id] = ep
	}
	return ep
}

type tokenBody struct {
	U string `json:"u"`
	E uint64 `json:"e"`
	C uint64 `json:"c"`
}

func (s *Server) token(ep *endpoint) string {
	b, _ := json.Marshal(tokenBody{U: s.incarnation, E: ep.id, C: ep.queued})
	if s.cfg.PaddedTokens {
		// "~~~" and "???" put '+' and '/' in the standard encoding at any
		// alignment; a length that is not a multiple of 3 adds '='.
		b, _ = json.Marshal(struct {
			tokenBody
			P string `json:"p"`
		}{tokenBody{U: s.incarnation, E: ep.id, C: ep.queued}, "~~~???"})
		if len(b)%3 == 0 {
			b = append(b, ' ')
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseToken(tok string) (tokenBody, error) {
	var tb tokenBody
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		raw, err = base64.StdEncoding.DecodeString(tok)
	}
	if err != nil {
		return tb, err
	}
	err = json.Unmarshal(raw, &tb)
	return tb, err
}

// parseBody parses NDJSON (or arrays with array=true) into commands; bad
// events are reported and skipped, good ones kept, as Feldera does. A
// syntactically broken document ends the parse.
//
// event is how many events came before body (a request parsed chunk by
// chunk numbers its events across chunks); the count after it returns.
func parseBody(t *table, body []byte, a ingressArgs, event int) ([]op, []parseError, int) {
	var ops []op
	var errs []parseError
	if !a.formatIsJSON {
		// format defaults to csv: a JSON body is not CSV the double can read.
		for _, line := range bytes.Split(body, []byte{'\n'}) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			event++
			errs = append(errs, parseError{Description: "felderatest: CSV input is not supported (did you forget format=json? Feldera's default is csv)", EventNumber: event})
		}
		return nil, errs, event
	}
	if lines, ok := ndjsonLines(body, a); ok {
		for _, v := range lines {
			event++
			ops, errs = addEvent(t, v, a.raw, event, ops, errs)
		}
		return ops, errs, event
	}
	return parseStream(t, body, a, event)
}

// parseStream is parseBody through encoding/json's stream decoder: the
// reference the line-by-line path agrees with (FuzzParseBody).
func parseStream(t *table, body []byte, a ingressArgs, event int) ([]op, []parseError, int) {
	var ops []op
	var errs []parseError
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			event++
			errs = append(errs, parseError{Description: "failed to parse JSON: " + err.Error(), EventNumber: event})
			break
		}
		if a.array {
			var elems []json.RawMessage
			if err := json.Unmarshal(v, &elems); err != nil {
				event++
				errs = append(errs, parseError{Description: "expected an array: " + err.Error(), EventNumber: event})
				continue
			}
			var arrOps []op
			bad := false
			for _, e := range elems {
				event++
				o, err := parseEvent(t, e, a.raw)
				if err != nil {
					errs = append(errs, toParseError(err, event))
					bad = true
					continue
				}
				arrOps = append(arrOps, o...)
			}
			if !bad {
				ops = append(ops, arrOps...)
			}
			continue
		}
		event++
		ops, errs = addEvent(t, v, a.raw, event, ops, errs)
	}
	return ops, errs, event
}

// addEvent parses event number event and appends its commands, or its
// error: a bad event is reported and skipped, as Feldera's JSON parser
// does (crates/adapters/src/format/json/input.rs: a ParseError per bad
// record, and the next record is parsed).
func addEvent(t *table, v json.RawMessage, raw bool, event int, ops []op, errs []parseError) ([]op, []parseError) {
	o, err := parseEvent(t, v, raw)
	if err != nil {
		return ops, append(errs, toParseError(err, event))
	}
	return append(ops, o...), errs
}

// envelope splits an event into its commands, with encoding/json's
// answer wherever jsonscan does not take the event on.
func envelope(v json.RawMessage) (map[string]json.RawMessage, error) {
	var buf [3]jsonscan.Member
	if members, ok := jsonscan.Object(v, buf[:0]); ok {
		env := make(map[string]json.RawMessage, len(members))
		for _, m := range members {
			env[m.Key] = m.Value // the last of a repeated key, as encoding/json
		}
		return env, nil
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(v, &env); err != nil {
		return nil, fmt.Errorf("invalid type: %s, expected an insert/delete/update object", describe(bytes.TrimSpace(v)))
	}
	return env, nil
}

// ndjsonLines splits a body whose every non-blank line is exactly one
// valid JSON value into those values: the events encoding/json's stream
// decoder would read from it, found without decoding them. Any other body
// (values spanning or sharing lines, invalid JSON, arrays) is not ok, and
// goes through the decoder.
func ndjsonLines(body []byte, a ingressArgs) ([]json.RawMessage, bool) {
	if a.array {
		return nil, false
	}
	var lines []json.RawMessage
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = jsonscan.Trim(line)
		if len(line) == 0 {
			continue
		}
		if jsonscan.Value(line) != len(line) {
			return nil, false
		}
		lines = append(lines, line)
	}
	return lines, true
}

func toParseError(err error, event int) parseError {
	pe := parseError{Description: err.Error(), EventNumber: event}
	if fe, ok := err.(*fieldError); ok {
		f := fe.field
		pe.Field = &f
	}
	return pe
}

// parseEvent reads one {"insert"|"delete"|"update": R} envelope (or, with
// raw, one record to insert). Commands run delete, insert, update.
func parseEvent(t *table, v json.RawMessage, raw bool) ([]op, error) {
	if raw {
		vals, set, err := t.parseRecord(v, 'i')
		if err != nil {
			return nil, err
		}
		return []op{{kind: 'i', row: vals, set: set}}, nil
	}
	env, err := envelope(v)
	if err != nil {
		return nil, err
	}
	// Of several unknown fields, the first in sorted order is named, so
	// the answer does not depend on map order.
	var unknown []string
	for k := range env {
		if k != "insert" && k != "delete" && k != "update" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown field `%s`, expected one of `table`, `insert`, `delete`, `update`", unknown[0])
	}
	var out []op
	for _, kind := range []struct {
		name string
		k    byte
	}{{"delete", 'd'}, {"insert", 'i'}, {"update", 'u'}} {
		rec, ok := env[kind.name]
		if !ok {
			continue
		}
		if kind.k == 'u' && !t.keyed() {
			return nil, fmt.Errorf("update operation is not supported on this stream")
		}
		vals, set, err := t.parseRecord(rec, kind.k)
		if err != nil {
			return nil, err
		}
		out = append(out, op{kind: kind.k, row: vals, set: set})
	}
	return out, nil
}
