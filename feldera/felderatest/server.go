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
// It steps as Feldera does (internal/circuit): a request body is read in
// chunks that are queued as they arrive; a step feeds each endpoint's
// queue up to a cap, runs as an automatic transaction unless the API or a
// connector holds one, takes time, and shows its results only when it
// ends; API transactions start at the next step and commit over steps that
// feed no input. The knobs (Config's stepping fields, HoldCompletion,
// SetCompletionDelay, SetCommitDelay) slow or stop it; faults
// (InjectFault) make requests fail, hang, or drop their connection.
//
// All methods are safe for concurrent use.
package felderatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/circuit"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/ftconfig"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

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

// Server is a running Feldera double.
type Server struct {
	*httptest.Server
	URL string

	cfg Config
	ft  ftconfig.Setting // cfg's fault tolerance

	mu            sync.Mutex
	tables        map[string]*table.Table
	order         []string
	incarnation   string
	deploymentID  string
	status        string
	endpoints     map[string]*circuit.Endpoint
	endpointByID  map[uint64]*circuit.Endpoint
	nextEndpoint  uint64
	c             *circuit.Circuit // the steps and transactions
	faults        []*Fault
	unblock       chan struct{} // closed by ClearFaults and Resume
	requests      []Request
	keyInserts    map[string]map[string]int
	missedDeletes int
	countOnly     map[string]int
	held          int                    // requests a fault holds now
	heldReqs      map[*http.Request]bool // HangThenApply requests held now
	served        map[FaultKind]int
	late          []lateMark // HangThenApply requests whose client had left
	pending       int        // completion polls answered "inprogress"
	pushedBack    int        // requests that found their endpoint's buffer full

	txnCommits         int
	txnConflicts       int
	requestSeq         int
	deferredCheckpoint bool // asked for during a transaction: taken after its commit
	orderViolations    int

	processed      uint64 // records processed
	checkpoints    []checkpoint
	ckptSeq        int // per process, like Feldera's checkpoint_sequence_number
	ckptSuccess    int
	ckptFailure    map[string]any    // /checkpoint_status failure: the last checkpoint that failed
	ckptFail       string            // FailCheckpoints: every checkpoint fails with this
	permErrors     []json.RawMessage // SetPermanentCheckpointErrors
	journalGap     bool              // exactly_once after a program change: no journal until a checkpoint
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
	s := &Server{cfg: cfg, tables: map[string]*table.Table{}, status: "Running", unblock: make(chan struct{}), countOnly: map[string]int{}, keyInserts: map[string]map[string]int{}, served: map[FaultKind]int{}}
	for _, rel := range cfg.Tables {
		t, err := table.New(rel)
		if err != nil {
			return nil, err
		}
		t.WatchOrder(cfg.OrderColumn)
		name := rel.CanonicalName()
		if _, dup := s.tables[name]; dup {
			return nil, fmt.Errorf("felderatest: table %s declared twice", name)
		}
		s.tables[name] = t
		s.order = append(s.order, name)
	}
	s.ft = ftconfig.Setting{FaultTolerance: cfg.FaultTolerance, FaultTolerant: cfg.FaultTolerant, CheckpointEvery: cfg.CheckpointEvery}
	s.c = circuit.New(circuit.Config{StepTime: cfg.StepTime, StepJitter: cfg.StepJitter, StepPerRecord: cfg.StepPerRecord,
		CommitPerRecord: cfg.CommitPerRecord, StepRecords: cfg.StepRecords, NoAutoTransactions: cfg.NoAutoTransactions,
		StepsOnPoll: cfg.StepsOnPoll, Seed: cfg.Seed}, s.publish)
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
	s.endpoints = map[string]*circuit.Endpoint{}
	s.endpointByID = map[uint64]*circuit.Endpoint{}
	s.c.Reset(time.Now()) // a new process: its queues, step and transactions are gone
	s.deferredCheckpoint = false
}

// ---- knobs ----

// HoldCompletion stops (true) or restarts (false) steps: while held, pushed
// data is queued but neither applied nor complete, like a stuck sink.
func (s *Server) HoldCompletion(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.SetHold(hold, time.Now())
}

// SetCompletionDelay makes each push complete d after it arrived.
func (s *Server) SetCompletionDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Delay = d
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

// Restart simulates a pipeline restart: a new incarnation and deployment
// id, old tokens answer 410 PipelineRestarted, queued (uncompleted) data is
// lost, and so is all table state unless the pipeline is FaultTolerant.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.newIncarnation()
	if !s.ft.Tolerant() {
		for _, t := range s.tables {
			t.Clear()
		}
	}
}

// DeploymentID returns the current deployment id.
func (s *Server) DeploymentID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deploymentID
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
	s.route(w, r, rest)
}

// route hands a request for the deployed pipeline to its handler.
func (s *Server) route(w http.ResponseWriter, r *http.Request, rest string) {
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
			inputs = append(inputs, s.tables[n].Rel)
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
