// Package felderatest provides an in-memory double of Feldera's HTTP API for
// tests and the demo, in the style of net/http/httptest.
//
// A Server serves one pipeline whose tables are described by
// feldera.Relation values (or ParseDDL). It reproduces the behaviour a
// connector depends on (see API.md, "Semantics a test double must
// reproduce"): the error body, optional API-key auth, the schema document,
// ingress with format/update_format/array parameters, Feldera's field
// matching and type checks, PRIMARY KEY upserts and keyless multisets,
// 400 ParseErrors after applying the good lines, per-endpoint completion
// tokens, restarts that turn old tokens into 410, and ad-hoc queries.
//
// Data pushed to ingress is queued; a "step" applies queued data in arrival
// order and completes its tokens. By default a step runs at once; the
// completion knobs (HoldCompletion, SetCompletionDelay) delay it. Faults
// (InjectFault) make requests fail, hang, or drop their connection.
//
// All methods are safe for concurrent use.
package felderatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Config describes the pipeline a Server serves.
type Config struct {
	Pipeline string             // default "pipeline"
	Tables   []feldera.Relation // the program's tables
	APIKey   string             // when set, requests need "Authorization: Bearer <APIKey>"

	// PaddedTokens issues tokens in standard base64 with padding (which
	// holds '+', '/' and '='), like the docs' example, to prove clients
	// percent-encode them. Both encodings are accepted.
	PaddedTokens bool
	// IngressTimeout is how long ingress blocks on a paused pipeline before
	// the manager answers 503 (Feldera: 30 s).
	IngressTimeout time.Duration
	// CountOnly makes ingress only count lines: no parsing, no state, tokens
	// complete at once, and COUNT(*) answers the lines counted. For
	// throughput benchmarks of the sender, which insert distinct keys.
	CountOnly bool
	// OnIngress, in CountOnly mode, sees each request body as it arrives
	// (a benchmark's arrival clock). It must not keep body.
	OnIngress func(table string, body []byte, arrived time.Time)
	// FaultTolerant keeps completed state across Restart, like a pipeline
	// with Enterprise fault tolerance, and reports
	// {"model": "at_least_once"}.
	FaultTolerant bool
	// StepsOnPoll runs steps only when a client asks for a token's
	// completion: pushed data stays queued, invisible and uncompleted,
	// until someone waits for it, and a Restart drops it (Feldera loses
	// input that was accepted but not yet fed to a step). A connector that
	// dies right after a POST thus leaves nothing behind in the tables, so
	// a restart that skipped unacknowledged WAL loses rows a test can see.
	StepsOnPoll bool
	// FaultTolerance, when set, is reported verbatim as
	// runtime_config.fault_tolerance (any form Feldera accepts: `{}`,
	// `{"model": "none"}`, `"latest_checkpoint"`, `null`, …), and Restart
	// keeps completed state exactly when Feldera would read it as fault
	// tolerant. It overrides FaultTolerant.
	FaultTolerance string
	// CheckpointEvery takes a checkpoint this often when the model is not
	// none; 0 reads checkpoint_interval_secs from FaultTolerance, as
	// Feldera does (default 60 s, null: only on request).
	CheckpointEvery time.Duration
	// NoCheckpoints answers POST /checkpoint with 501 EnterpriseFeature
	// even under fault tolerance, like Feldera's OSS edition.
	NoCheckpoints bool
	// OutputEndpoints are the output connectors /stats lists; none by
	// default (then completion can run ahead of the steps: feldera#7169).
	OutputEndpoints []string
}

// Request is one ingress request as the double saw it.
type Request struct {
	Time    time.Time
	Table   string // canonical table name
	Status  int
	Inserts int // insert commands applied or queued
	Deletes int
	Updates int
	Errors  int  // lines rejected with ParseErrors
	Lines   int  // lines in the body, blank ones excepted
	Late    bool // a HangThenApply request applied after its client gave up
	// InsertKeys and DeleteKeys are the keys (as in InsertsByKey) of a
	// keyed table's inserts and deletes, in body order.
	InsertKeys, DeleteKeys []string
}

// FaultKind says what an injected fault does.
type FaultKind int

const (
	// FailStatus answers with Status and a Feldera error body (Code).
	FailStatus FaultKind = iota
	// Hang never answers until the fault is cleared or the client gives up.
	Hang
	// Drop closes the connection without an answer.
	Drop
	// PartialThen503 ingests the first half of the body's good events, then
	// answers 503 (an ingress request that timed out in the manager).
	PartialThen503
	// HangThenApply reads the body, holds the request until ClearFaults, and
	// then applies it even if the client gave up long ago: the late
	// duplicate a connector must fence against.
	HangThenApply
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

type endpoint struct {
	id        uint64
	table     *table
	queued    uint64
	completed uint64
	step      uint64 // the step that completed the endpoint's last records
}

type batch struct {
	ep      *endpoint
	ops     []op
	readyAt time.Time
	upTo    uint64
}

// Server is a running Feldera double.
type Server struct {
	*httptest.Server
	URL string

	cfg Config

	mu            sync.Mutex
	tables        map[string]*table
	order         []string
	incarnation   string
	deploymentID  string
	status        string
	endpoints     map[string]*endpoint
	endpointByID  map[uint64]*endpoint
	nextEndpoint  uint64
	queue         []*batch
	hold          bool
	delay         time.Duration
	faults        []*Fault
	unblock       chan struct{} // closed by ClearFaults and Resume
	requests      []Request
	keyInserts    map[string]map[string]int
	missedDeletes int
	countOnly     map[string]int
	held          int // requests a fault holds now
	served        map[FaultKind]int
	lateApplied   int // HangThenApply requests applied after their client left
	pending       int // completion polls answered "inprogress"

	steps          uint64 // the circuit's step count; carries across restarts
	processed      uint64 // records processed
	checkpoints    []checkpoint
	ckptSeq        int // per process, like Feldera's checkpoint_sequence_number
	ckptSuccess    int
	ckptRequests   int
	lastCheckpoint time.Time
}

// NewServer starts a double serving cfg. Close it when done.
func NewServer(cfg Config) (*Server, error) {
	s, err := NewUnstartedServer(cfg)
	if err != nil {
		return nil, err
	}
	s.Start()
	s.URL = s.Server.URL
	return s, nil
}

// NewUnstartedServer returns a double that is not yet listening; set
// s.Server.Listener if needed, then call Start.
func NewUnstartedServer(cfg Config) (*Server, error) {
	if cfg.Pipeline == "" {
		cfg.Pipeline = "pipeline"
	}
	if cfg.IngressTimeout == 0 {
		cfg.IngressTimeout = 30 * time.Second
	}
	if cfg.FaultTolerance != "" && !json.Valid([]byte(cfg.FaultTolerance)) {
		return nil, fmt.Errorf("felderatest: FaultTolerance %q is not JSON", cfg.FaultTolerance)
	}
	s := &Server{cfg: cfg, tables: map[string]*table{}, status: "Running", unblock: make(chan struct{}), countOnly: map[string]int{}, keyInserts: map[string]map[string]int{}, served: map[FaultKind]int{}}
	for _, rel := range cfg.Tables {
		t, err := newTable(rel)
		if err != nil {
			return nil, err
		}
		name := rel.CanonicalName()
		if _, dup := s.tables[name]; dup {
			return nil, fmt.Errorf("felderatest: table %s declared twice", name)
		}
		s.tables[name] = t
		s.order = append(s.order, name)
	}
	s.newIncarnation()
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	return s, nil
}

// Start starts the server.
func (s *Server) Start() {
	s.Server.Start()
	s.URL = s.Server.URL
}

// Close releases requests held by faults, then shuts the server down,
// blocking until all outstanding requests on it have completed.
func (s *Server) Close() {
	s.ClearFaults()
	s.Server.Close()
}

// Pipeline is the served pipeline's name.
func (s *Server) Pipeline() string { return s.cfg.Pipeline }

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *Server) newIncarnation() {
	s.incarnation = newUUID()
	s.deploymentID = newUUID()
	s.endpoints = map[string]*endpoint{}
	s.endpointByID = map[uint64]*endpoint{}
	s.queue = nil
}

// ---- knobs ----

// HoldCompletion stops (true) or restarts (false) steps: while held, pushed
// data is queued but neither applied nor complete, like a stuck sink.
func (s *Server) HoldCompletion(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = hold
	s.advance(time.Now())
}

// SetCompletionDelay makes each push complete d after it arrived.
func (s *Server) SetCompletionDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetStatus sets deployment_status: "Running", "Paused" (ingress blocks,
// then 503), or "Stopped" (503 PipelineInteractionNotDeployed).
func (s *Server) SetStatus(status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
	if status == "Running" {
		close(s.unblock)
		s.unblock = make(chan struct{})
	}
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

// Restart simulates a pipeline restart: a new incarnation and deployment
// id, old tokens answer 410 PipelineRestarted, queued (uncompleted) data is
// lost, and so is all table state unless the pipeline is FaultTolerant.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.newIncarnation()
	if !s.faultTolerant() {
		for _, t := range s.tables {
			t.clear()
		}
	}
}

// faultTolerant reports whether completed state survives Restart.
func (s *Server) faultTolerant() bool {
	if s.cfg.FaultTolerance == "" {
		return s.cfg.FaultTolerant
	}
	// Read independently of the client's parser, so that a bug there
	// cannot hide in the double: Feldera's FtConfig rules.
	var v any
	if json.Unmarshal([]byte(s.cfg.FaultTolerance), &v) != nil {
		return false
	}
	switch x := v.(type) {
	case string:
		return x == "initial_state" || x == "latest_checkpoint"
	case map[string]any:
		m, ok := x["model"]
		if !ok {
			return true
		}
		name, _ := m.(string)
		return name == "at_least_once" || name == "exactly_once"
	}
	return false
}

// DeploymentID returns the current deployment id.
func (s *Server) DeploymentID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deploymentID
}

// Requests returns the ingress request log.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// MissedDeletes counts deletes of rows a keyless table did not hold
// (undefined behaviour in Feldera).
func (s *Server) MissedDeletes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.missedDeletes
}

// Rows returns the applied rows of a table (canonical name), sorted by key.
func (s *Server) Rows(tableName string) []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	t, ok := s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return nil
	}
	return t.snapshot()
}

// InsertsByKey counts, per key of a keyed table, the insert commands
// ingress received (including replays). Keys are rendered as their JSON
// values joined by ",": {"id":7} → "7".
func (s *Server) InsertsByKey(tableName string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.keyInserts[feldera.TableIdent(tableName)] {
		out[k] = v
	}
	return out
}

func keyText(row []json.RawMessage, idx []int) string {
	parts := make([]string, len(idx))
	for i, j := range idx {
		parts[i] = string(row[j])
	}
	return strings.Join(parts, ",")
}

// CountedRows is, in CountOnly mode, the number of lines pushed to a table.
func (s *Server) CountedRows(tableName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countOnly[feldera.TableIdent(tableName)]
}

// Put applies an insert (upsert) of a row given as a JSON object directly to
// a table's state, bypassing ingress: for planting differences in tests.
func (s *Server) Put(tableName string, rowJSON string) error {
	return s.direct(tableName, rowJSON, 'i')
}

// Delete removes a row (by key on a keyed table) directly from the state.
func (s *Server) Delete(tableName string, rowJSON string) error {
	return s.direct(tableName, rowJSON, 'd')
}

func (s *Server) direct(tableName, rowJSON string, kind byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return fmt.Errorf("felderatest: no table %s", tableName)
	}
	vals, set, err := t.parseRecord(json.RawMessage(rowJSON), kind)
	if err != nil {
		return err
	}
	t.apply(op{kind: kind, row: vals, set: set})
	return nil
}

// advance runs every step whose time has come, in arrival order, unless
// steps run only on a completion poll (Config.StepsOnPoll).
func (s *Server) advance(now time.Time) {
	if s.cfg.StepsOnPoll {
		return
	}
	s.step(now)
}

func (s *Server) step(now time.Time) {
	for len(s.queue) > 0 && !s.hold && !s.queue[0].readyAt.After(now) {
		b := s.queue[0]
		s.queue = s.queue[1:]
		s.steps++ // one step per batch: its records are processed at this step
		s.processed += uint64(len(b.ops))
		for _, o := range b.ops {
			if b.ep.table.apply(o) {
				s.missedDeletes++
			}
		}
		if b.upTo > b.ep.completed {
			b.ep.completed = b.upTo
			b.ep.step = s.steps
		}
	}
}

// ---- HTTP ----

func writeError(w http.ResponseWriter, status int, code, msg string, details any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if details == nil {
		details = map[string]any{}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"message": msg, "error_code": code, "details": details})
}

var pathRE = regexp.MustCompile(`^/v0/pipelines/([^/]+)(/.*)?$`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	m := pathRE.FindStringSubmatch(r.URL.EscapedPath())
	if m == nil {
		http.NotFound(w, r)
		return
	}
	name, _ := url.PathUnescape(m[1])
	if name != s.cfg.Pipeline {
		writeError(w, http.StatusNotFound, "UnknownPipelineName", fmt.Sprintf("Unknown pipeline name '%s'", name), map[string]any{"pipeline_name": name})
		return
	}
	rest := m[2]
	s.mu.Lock()
	s.periodic(time.Now())
	s.mu.Unlock()
	done, late := s.fault(w, r, rest)
	if done {
		return
	}
	if late {
		r = r.WithContext(context.WithValue(r.Context(), lateKey{}, true))
	}
	switch {
	case rest == "" && r.Method == http.MethodGet:
		s.getPipeline(w, r)
		return
	}
	s.mu.Lock()
	status := s.status
	s.mu.Unlock()
	if status == "Stopped" {
		writeError(w, http.StatusServiceUnavailable, "PipelineInteractionNotDeployed",
			fmt.Sprintf("Pipeline %s is not deployed", name),
			map[string]any{"pipeline_name": name, "status": "Stopped", "desired_status": "Stopped"})
		return
	}
	switch {
	case strings.HasPrefix(rest, "/ingress/") && r.Method == http.MethodPost:
		s.ingress(w, r, strings.TrimPrefix(rest, "/ingress/"))
	case rest == "/completion_status" && r.Method == http.MethodGet:
		s.completionStatus(w, r)
	case rest == "/query" && r.Method == http.MethodGet:
		s.query(w, r)
	case rest == "/stats" && r.Method == http.MethodGet:
		s.stats(w, r)
	case rest == "/checkpoint" && r.Method == http.MethodPost:
		s.postCheckpoint(w, r)
	case rest == "/checkpoint_status" && r.Method == http.MethodGet:
		s.checkpointStatus(w, r)
	case rest == "/checkpoints" && r.Method == http.MethodGet:
		s.listCheckpoints(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		w.WriteHeader(http.StatusUnauthorized)
		return false
	}
	if h != "Bearer "+s.cfg.APIKey {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"message":"Unauthorized API key","error_code":"AuthenticationFailed"}`)
		return false
	}
	return true
}

type lateKey struct{}

// fault applies the first matching injected fault; done means the request
// was answered (or dropped) by it, late that it is a HangThenApply request
// released after its client gave up.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, rest string) (done, late bool) {
	s.mu.Lock()
	var f *Fault
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
	unblock := s.unblock
	if f != nil {
		s.served[f.Kind]++
	}
	s.mu.Unlock()
	if f == nil {
		return false, false
	}
	switch f.Kind {
	case FailStatus:
		io.Copy(io.Discard, r.Body)
		writeError(w, f.Status, f.Code, "injected fault: "+f.Code, nil)
	case Hang:
		// Read the body first: net/http notices a client that went away
		// only once the body was consumed.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return true, false
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.holding(1)
		defer s.holding(-1)
		select {
		case <-unblock:
			// A request whose client gave up is not processed late: the
			// manager drops a forwarded request when its client leaves.
			// (HangThenApply is the other behaviour.)
			return r.Context().Err() != nil, false
		case <-r.Context().Done():
		}
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
		<-unblock
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

// LateApplied is how many HangThenApply requests were applied after their
// client had given up (the late duplicates a fence must outwait).
func (s *Server) LateApplied() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lateApplied
}

// PendingPolls is how many completion polls were answered "inprogress": a
// client that waits for a held token polls again and again.
func (s *Server) PendingPolls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

func (s *Server) getPipeline(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	doc := map[string]any{
		"name":                        s.cfg.Pipeline,
		"deployment_status":           s.status,
		"deployment_desired_status":   s.status,
		"deployment_resources_status": map[bool]string{true: "Stopped", false: "Provisioned"}[s.status == "Stopped"],
		"deployment_id":               s.deploymentID,
		"deployment_error":            nil,
		"program_status":              "Success",
		"program_version":             1,
	}
	sel := r.URL.Query().Get("selector")
	if sel == "" || sel == "all" {
		inputs := make([]feldera.Relation, 0, len(s.order))
		for _, n := range s.order {
			inputs = append(inputs, s.tables[n].rel)
		}
		doc["program_info"] = map[string]any{"schema": map[string]any{
			"inputs":  inputs,
			"outputs": []any{map[string]any{"name": "error_view", "case_sensitive": false, "fields": []any{}, "materialized": false, "primary_key": nil}},
		}}
		var ft any
		switch {
		case s.cfg.FaultTolerance != "":
			ft = json.RawMessage(s.cfg.FaultTolerance)
		case s.cfg.FaultTolerant:
			ft = map[string]any{"model": "at_least_once", "checkpoint_interval_secs": 60}
		}
		doc["runtime_config"] = map[string]any{"workers": 8, "fault_tolerance": ft}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

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
		ep.completed = ep.queued
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
	req := Request{Time: time.Now(), Table: canon, Errors: len(perrs), Lines: lines}
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
	s.queue = append(s.queue, &batch{ep: ep, ops: ops, readyAt: now.Add(s.delay), upTo: ep.queued})
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
		ep = &endpoint{id: s.nextEndpoint, table: t}
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

// ---- completion ----

func (s *Server) completionStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("token") {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(400)
		io.WriteString(w, "Query deserialize error: missing field `token`")
		return
	}
	tok, err := parseToken(q.Get("token"))
	if err != nil {
		writeError(w, 400, "InvalidParam", "Invalid parameter: invalid completion token: "+err.Error(), map[string]any{"error": err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok.U != s.incarnation {
		writeError(w, http.StatusGone, feldera.CodePipelineRestarted,
			"The pipeline has been restarted since the completion token was generated", nil)
		return
	}
	ep, ok := s.endpointByID[tok.E]
	if !ok {
		writeError(w, http.StatusGone, "UnknownEndpointInCompletionToken", "The completion token refers to an unknown input endpoint", nil)
		return
	}
	s.step(time.Now())
	status := "inprogress"
	var step any
	if ep.completed >= tok.C {
		status = "complete"
		step = ep.step // conservative: the step of the endpoint's latest completed records
	} else {
		s.pending++
	}
	writeJSON(w, 200, map[string]any{"status": status, "step": step})
}

// ---- ad-hoc query ----

var (
	reSelect = regexp.MustCompile(`(?is)^\s*SELECT\s+(.+?)\s+FROM\s+("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)\s*(?:ORDER\s+BY\s+(.+?))?\s*;?\s*$`)
	reCount  = regexp.MustCompile(`(?i)^count\(\s*\*\s*\)$`)
)

func (s *Server) query(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sqlText := q.Get("sql")
	if f := q.Get("format"); f != "json" {
		writeError(w, 400, "InvalidParam", "felderatest: only format=json is supported", nil)
		return
	}
	m := reSelect.FindStringSubmatch(sqlText)
	if m == nil {
		writeError(w, 400, feldera.CodeAdHocQueryError, "Error during query processing: felderatest supports only SELECT cols|*|COUNT(*) FROM t [ORDER BY ...]: "+sqlText, map[string]any{"error": "unsupported query"})
		return
	}
	canon := feldera.TableIdent(m[2])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	t, ok := s.tables[canon]
	if !ok {
		writeError(w, 400, feldera.CodeAdHocQueryError, fmt.Sprintf("Error during query processing: Error during planning: table '%s' not found", canon), map[string]any{"error": "table not found"})
		return
	}
	if !t.queryable() {
		writeError(w, 400, feldera.CodeAdHocQueryError,
			fmt.Sprintf("Error during query processing: Tried to SELECT from a non-materialized source. Make sure `%s` is configured as materialized: use `with ('materialized' = 'true')` for tables, or `create materialized view` for views", canon),
			map[string]any{"error": "non-materialized source"})
		return
	}
	cols := strings.TrimSpace(m[1])
	w.Header().Set("Content-Type", "application/json")
	rows := t.snapshot()
	if reCount.MatchString(cols) {
		n := len(rows)
		if s.cfg.CountOnly {
			n = s.countOnly[canon] // benchmarks insert distinct keys only
		}
		fmt.Fprintf(w, "{\"count(*)\":%d}\n", n)
		return
	}
	var names []string
	if cols == "*" {
		for _, f := range t.rel.Fields {
			names = append(names, f.CanonicalName())
		}
	} else {
		for _, c := range strings.Split(cols, ",") {
			n := feldera.TableIdent(strings.TrimSpace(c))
			f, ok := t.rel.Field(n)
			if !ok {
				w.Header().Del("Content-Type")
				writeError(w, 400, feldera.CodeAdHocQueryError, fmt.Sprintf("Error during query processing: Schema error: No field named %s", n), map[string]any{"error": "no field"})
				return
			}
			names = append(names, f.CanonicalName())
		}
	}
	var b bytes.Buffer
	for _, row := range rows {
		b.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(mustJSON(n))
			b.WriteByte(':')
			b.Write(row[n])
		}
		b.WriteString("}\n")
	}
	w.Write(b.Bytes())
}
