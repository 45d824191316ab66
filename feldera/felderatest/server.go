// Package felderatest provides an in-memory double of Feldera's HTTP API for
// tests and the demo, in the style of net/http/httptest.
//
// A Server serves one pipeline whose tables are described by
// feldera.Relation values (or ParseDDL). It reproduces the behaviour a
// connector depends on, each from Feldera's source (repository
// feldera/feldera; the file and function are named beside each model):
// the error body, optional API-key auth, the schema document, ingress with
// format/update_format/array parameters, Feldera's field matching and type
// checks, PRIMARY KEY upserts and keyless multisets, 400 ParseErrors after
// applying the good lines, per-endpoint completion tokens, ad-hoc queries
// printed as Feldera prints them, and the ways Feldera keeps or loses
// state: checkpoints, restarts by fault-tolerance model, program changes
// that bootstrap modified tables, restores of older checkpoints.
//
// It steps as Feldera does (circuit.go): a request body is read in chunks
// that are queued as they arrive; a step feeds each endpoint's queue up to
// a cap, runs as an automatic transaction unless the API or a connector
// holds one, takes time, and shows its results only when it ends; API
// transactions start at the next step and commit over steps that feed no
// input. The knobs (Config's stepping fields, HoldCompletion,
// SetCompletionDelay, SetCommitDelay) slow or stop it; faults
// (InjectFault) make requests fail, hang, or drop their connection.
//
// All methods are safe for concurrent use.
package felderatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
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
	// complete at once (or after SetCompletionDelay), and COUNT(*) answers
	// the lines counted. For
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
	// OrderColumn names a column (in any table that has it and a primary
	// key) whose value only grows per key in the source's commit order,
	// such as a version counter. A step that applies an insert of a key
	// with a smaller value than one applied before for that key counts an
	// order violation (OrderViolations): rows that reached Feldera out of
	// commit order.
	OrderColumn string
	// OnState, when set, sees every state the pipeline exposes: after each
	// step that applied input outside a transaction, and after each
	// commit. It runs with the double locked: it may read the View, and
	// must not call the Server.
	OnState func(View)
	// OutputEndpoints are the output connectors /stats lists; none by
	// default (then completion can run ahead of the steps: feldera#7169).
	OutputEndpoints []string

	// How the pipeline steps (circuit.go). Zero values take the
	// defaults, which follow Feldera's own where it has one.
	//
	// A step takes StepTime (DefaultStepTime), plus a random part of
	// StepJitter (DefaultStepJitter), plus StepPerRecord for each record
	// it feeds; set StepTime negative for steps that take no time.
	StepTime, StepJitter, StepPerRecord time.Duration
	// CommitPerRecord is how long an API or connector transaction's
	// commit takes per record it holds, on top of SetCommitDelay: a long
	// commit runs over many steps and feeds no input meanwhile.
	CommitPerRecord time.Duration
	// StepRecords is the per-endpoint soft cap of records one step
	// feeds (DefaultStepRecords: 8 workers × 10,000).
	StepRecords int
	// ReadBytes is how much of a request body one read takes: each read
	// is split at record boundaries and queued at once, so a step can
	// take a prefix of a request (DefaultReadBytes).
	ReadBytes int
	// MaxQueuedRecords is how many records an ingress endpoint queues
	// before it stops reading a body until a step takes some
	// (DefaultMaxQueuedRecords); a body held past IngressTimeout is
	// answered 503, as the manager does, with what was read queued.
	MaxQueuedRecords int
	// NoAutoTransactions turns off automatic per-step transactions, as
	// Feldera's dev_tweaks.disable_auto_transaction does.
	NoAutoTransactions bool
	// Seed seeds the step jitter (0: the clock).
	Seed uint64
}

// withDefaults fills the stepping defaults.
func (cfg Config) withDefaults() Config {
	switch {
	case cfg.StepTime == 0:
		cfg.StepTime = DefaultStepTime
		if cfg.StepJitter == 0 {
			cfg.StepJitter = DefaultStepJitter
		}
	case cfg.StepTime < 0:
		cfg.StepTime = 0
	}
	if cfg.StepRecords <= 0 {
		cfg.StepRecords = DefaultStepRecords
	}
	if cfg.ReadBytes <= 0 {
		cfg.ReadBytes = DefaultReadBytes
	}
	if cfg.MaxQueuedRecords <= 0 {
		cfg.MaxQueuedRecords = DefaultMaxQueuedRecords
	}
	return cfg
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
	Bytes   int  // the body's size
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
	name      string // <path segment as sent>.api-ingress-<16 hex>, as /stats lists it
	table     *table
	queued    uint64 // records queued so far
	completed uint64 // records processed and visible so far
	step      uint64 // the step that completed the endpoint's last records
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
	queue         []*buffer // input no step took yet, in arrival order
	cur           *stepRun  // the step in progress
	idleAt        time.Time // when the last step ended
	resumedAt     time.Time // when HoldCompletion(false) let steps run again
	rng           *mrand.Rand
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
	late          []lateMark // HangThenApply requests whose client had left
	pending       int        // completion polls answered "inprogress"
	peakQueued    int        // the most ingress requests queued and not yet completed at once
	peakRows      int        // the most records queued and not yet completed at once
	pushedBack    int        // requests that found their endpoint's buffer full

	lastTID            int64      // per process: last_transaction_id
	init               initiators // who wants a transaction
	state              txnState   // the transaction the circuit runs
	commitDelay        time.Duration
	txnCommits         int
	txnConflicts       int
	txnDropped         int
	requestSeq         int
	deferredCheckpoint bool // asked for during a transaction: taken after its commit
	orderViolations    int

	steps          uint64 // the circuit's step count; carries across restarts
	processed      uint64 // records processed
	checkpoints    []checkpoint
	ckptSeq        int // per process, like Feldera's checkpoint_sequence_number
	ckptSuccess    int
	ckptFailure    map[string]any // /checkpoint_status failure: the last checkpoint that failed
	ckptFail       string         // FailCheckpoints: every checkpoint fails with this
	journalGap     bool           // exactly_once after a program change: no journal until a checkpoint
	ckptRequests   int
	lastCheckpoint time.Time
	programVersion int64
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
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, rng: newRNG(cfg.Seed), tables: map[string]*table{}, status: "Running", unblock: make(chan struct{}), countOnly: map[string]int{}, keyInserts: map[string]map[string]int{}, served: map[FaultKind]int{}}
	for _, rel := range cfg.Tables {
		t, err := newTable(rel)
		if err != nil {
			return nil, err
		}
		t.watchOrder(cfg.OrderColumn)
		name := rel.CanonicalName()
		if _, dup := s.tables[name]; dup {
			return nil, fmt.Errorf("felderatest: table %s declared twice", name)
		}
		s.tables[name] = t
		s.order = append(s.order, name)
	}
	s.newIncarnation()
	s.programVersion = 1
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
	// Input not yet processed, the step in progress and transactions
	// live in the process's memory only: a restart drops them, their
	// data, and the transaction id counter.
	s.queue, s.cur = nil, nil
	s.idleAt = time.Now()
	s.lastTID, s.init, s.state, s.deferredCheckpoint = 0, initiators{}, txnState{}, false
}

// ---- knobs ----

// HoldCompletion stops (true) or restarts (false) steps: while held, pushed
// data is queued but neither applied nor complete, like a stuck sink.
func (s *Server) HoldCompletion(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	if s.hold && !hold {
		s.resumedAt = now
	}
	s.hold = hold
	s.advance(now)
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

// RequestCount is how many ingress requests the log holds.
func (s *Server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
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

// View reads the tables inside a Config.OnState hook.
type View struct{ s *Server }

// Rows is the table's current rows (see Server.Rows).
func (v View) Rows(tableName string) []Row {
	t, ok := v.s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return nil
	}
	return t.snapshot()
}

// Len is how many rows the table holds now.
func (s *Server) Len(tableName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	return View{s}.Len(tableName)
}

// Len is how many rows the table holds.
func (v View) Len(tableName string) int {
	t, ok := v.s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return 0
	}
	if !t.keyed() {
		n := 0
		for _, c := range t.count {
			n += c
		}
		return n
	}
	return len(t.rows)
}

// SumInt adds up an integer column over the table's rows (NULL counts 0):
// cheap enough to check an invariant at every state.
func (v View) SumInt(tableName, column string) (int64, error) {
	t, ok := v.s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return 0, fmt.Errorf("felderatest: no table %s", tableName)
	}
	col := -1
	for i, f := range t.rel.Fields {
		if f.CanonicalName() == feldera.TableIdent(column) {
			col = i
		}
	}
	if col < 0 {
		return 0, fmt.Errorf("felderatest: table %s has no column %s", tableName, column)
	}
	var sum int64
	for k, vals := range t.rows {
		raw := vals[col]
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("felderatest: %s.%s = %s is not an integer", tableName, column, raw)
		}
		if !t.keyed() {
			n *= int64(t.count[k])
		}
		sum += n
	}
	return sum, nil
}

// exposed calls Config.OnState with the state a step just made visible.
func (s *Server) exposed() {
	if s.cfg.OnState != nil {
		s.cfg.OnState(View{s})
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
	case rest == "/start_transaction" && r.Method == http.MethodPost:
		s.startTransaction(w, r)
	case rest == "/commit_transaction" && r.Method == http.MethodPost:
		s.commitTransaction(w, r)
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

// lateMark is a late request's place in its endpoint: it is applied once
// the endpoint's completed records reach upTo, the rule of its completion
// token. Feldera shows a request's records, and completes its token, only
// when a step that fed them ends with no transaction in progress
// (crates/adapters/src/controller.rs, CircuitThread::step; see circuit.go),
// not when the HTTP input queues them (http/input.rs, complete_request).
type lateMark struct {
	ep   *endpoint
	upTo uint64
}

// LateApplied is how many HangThenApply requests were applied after their
// client had given up (the late duplicates a fence must outwait): their
// records processed by a step and visible, not only queued, so a test
// that reads the tables next sees them.
func (s *Server) LateApplied() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	n := 0
	for _, m := range s.late {
		if m.ep.completed >= m.upTo {
			n++
		}
	}
	return n
}

// PeakQueued is the most ingress requests that had records queued, not
// yet fed to a step, at once: more than one means a client kept several
// batches in flight.
func (s *Server) PeakQueued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakQueued
}

// PeakQueuedRecords is the most records that were queued, not yet fed to
// a step, at once (Feldera buffers at most 100,000 per ingress endpoint
// before it stops reading a POST).
func (s *Server) PeakQueuedRecords() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakRows
}

// PushedBack counts the ingress requests that found their endpoint's
// buffer full (Config.MaxQueuedRecords) and stopped being read until a
// step drained it: Feldera's backpressure, which a request meets only when
// more is in flight than Feldera buffers.
func (s *Server) PushedBack() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushedBack
}

// notePeak records how many requests and records Feldera buffers: queued,
// not yet fed to a step (the 100,000 records of its ingress bound).
func (s *Server) notePeak() {
	reqs := map[int]bool{}
	n := 0
	for _, b := range s.queue {
		reqs[b.req] = true
		n += b.records
	}
	s.peakQueued = max(s.peakQueued, len(reqs))
	s.peakRows = max(s.peakRows, n)
}

// OrderViolations counts inserts applied with a smaller Config.OrderColumn
// value than an earlier one for the same key.
func (s *Server) OrderViolations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orderViolations
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
		"program_version":             s.programVersion,
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
