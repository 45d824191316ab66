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

func (s *Server) lookupTable(w http.ResponseWriter, escaped string) (*table, string, bool) {
	name, err := url.PathUnescape(escaped)
	if err != nil {
		writeError(w, 400, "InvalidParam", "bad table name", nil)
		return nil, "", false
	}
	canon := feldera.TableIdent(name)
	s.mu.Lock()
	t, ok := s.tables[canon]
	s.mu.Unlock()
	if !ok {
		ep := canon + ".api-ingress-0000000000000000"
		writeError(w, http.StatusNotFound, "ConfigError.UnknownInputStream",
			fmt.Sprintf("invalid controller configuration: Input endpoint '%s' specifies unknown table '%s'", ep, canon),
			map[string]any{"config_error": map[string]any{"endpoint_name": ep, "stream_name": canon}})
		return nil, "", false
	}
	return t, canon, true
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
			writeError(w, http.StatusServiceUnavailable, "PipelineInteractionUnreachable",
				fmt.Sprintf("Pipeline %s is unreachable: timeout (%ds) was reached", s.cfg.Pipeline, int(s.cfg.IngressTimeout.Seconds())),
				map[string]any{"pipeline_name": s.cfg.Pipeline, "request": "ingress", "error": "timeout"})
			return false
		case <-r.Context().Done():
			return false
		}
	}
}

func (s *Server) ingress(w http.ResponseWriter, r *http.Request, escaped string) {
	s.ingressWith(w, r, escaped, false)
}

func (s *Server) ingressPartial(w http.ResponseWriter, r *http.Request, escaped string) {
	s.ingressWith(w, r, escaped, true)
}

func (s *Server) ingressWith(w http.ResponseWriter, r *http.Request, escaped string, partial bool) {
	t, canon, ok := s.lookupTable(w, escaped)
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
	if s.cfg.CountOnly {
		var n int
		var err error
		if s.cfg.OnIngress != nil {
			var body []byte
			if body, err = io.ReadAll(r.Body); err == nil {
				s.cfg.OnIngress(canon, body, time.Now())
				n = bytes.Count(body, []byte{'\n'})
			}
		} else {
			n, err = countLines(r.Body)
		}
		if err != nil {
			return // client went away mid-body
		}
		s.mu.Lock()
		s.countOnly[canon] += n
		ep := s.endpointFor(canon, t, args.endpointKey)
		ep.queued += uint64(n)
		if s.delay > 0 || s.txn != nil {
			// Completes d after arrival, like any push (SetCompletionDelay).
			now := time.Now()
			s.queue = append(s.queue, &batch{ep: ep, readyAt: now.Add(s.delay), upTo: ep.queued, rows: n})
			s.notePeak()
			s.advance(now)
		} else {
			ep.completed = ep.queued
		}
		tok := s.token(ep)
		s.mu.Unlock()
		writeJSON(w, 200, map[string]string{"token": tok})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // client went away mid-body
	}
	ops, perrs := parseBody(t, body, args)
	lines := 0
	for _, l := range bytes.Split(body, []byte{'\n'}) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines++
		}
	}
	if partial {
		ops = ops[:len(ops)/2]
	}
	req := Request{Time: time.Now(), Table: canon, Errors: len(perrs), Lines: lines, Bytes: len(body)}
	for _, o := range ops {
		switch o.kind {
		case 'i':
			req.Inserts++
		case 'd':
			req.Deletes++
		case 'u':
			req.Updates++
		}
	}
	s.mu.Lock()
	if t.keyed() {
		ki := s.keyInserts[canon]
		if ki == nil {
			ki = map[string]int{}
			s.keyInserts[canon] = ki
		}
		for _, o := range ops {
			switch o.kind {
			case 'i':
				k := keyText(o.row, t.pk)
				ki[k]++
				req.InsertKeys = append(req.InsertKeys, k)
			case 'd':
				req.DeleteKeys = append(req.DeleteKeys, keyText(o.row, t.pk))
			}
		}
	}
	ep := s.endpointFor(canon, t, args.endpointKey)
	ep.queued += uint64(len(ops))
	now := time.Now()
	s.queue = append(s.queue, &batch{ep: ep, ops: ops, readyAt: now.Add(s.delay), upTo: ep.queued, rows: len(ops)})
	s.notePeak()
	s.advance(now)
	tok := s.token(ep)
	switch {
	case partial:
		req.Status = http.StatusServiceUnavailable
	case len(perrs) > 0:
		req.Status = http.StatusBadRequest
	default:
		req.Status = http.StatusOK
	}
	if late, _ := r.Context().Value(lateKey{}).(bool); late {
		s.lateApplied++
		req.Late = true
	}
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	switch {
	case partial:
		writeError(w, http.StatusServiceUnavailable, "PipelineInteractionUnreachable",
			"Pipeline is unreachable: timeout (30s) was reached", map[string]any{"request": "ingress", "error": "timeout"})
	case len(perrs) > 0:
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
	default:
		writeJSON(w, 200, map[string]string{"token": tok})
	}
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

func (s *Server) endpointFor(canon string, t *table, key string) *endpoint {
	k := canon + "?" + key
	ep, ok := s.endpoints[k]
	if !ok {
		s.nextEndpoint++
		ep = &endpoint{id: s.nextEndpoint, table: t, name: fmt.Sprintf("%s.api-ingress-%016x", canon, s.nextEndpoint)}
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
func parseBody(t *table, body []byte, a ingressArgs) ([]op, []parseError) {
	var ops []op
	var errs []parseError
	if !a.formatIsJSON {
		// format defaults to csv: a JSON body is not CSV the double can read.
		n := 0
		for _, line := range bytes.Split(body, []byte{'\n'}) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			n++
			errs = append(errs, parseError{Description: "felderatest: CSV input is not supported (did you forget format=json? Feldera's default is csv)", EventNumber: n})
		}
		return nil, errs
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	event := 0
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
		o, err := parseEvent(t, v, a.raw)
		if err != nil {
			errs = append(errs, toParseError(err, event))
			continue
		}
		ops = append(ops, o...)
	}
	return ops, errs
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
	var env map[string]json.RawMessage
	if err := json.Unmarshal(v, &env); err != nil {
		return nil, fmt.Errorf("invalid type: %s, expected an insert/delete/update object", describe(bytes.TrimSpace(v)))
	}
	for k := range env {
		if k != "insert" && k != "delete" && k != "update" {
			return nil, fmt.Errorf("unknown field `%s`, expected one of `table`, `insert`, `delete`, `update`", k)
		}
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
