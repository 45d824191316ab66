// Package feldera is a client for the parts of Feldera's HTTP API that a
// Postgres CDC connector uses: reading a pipeline's status and compiled
// schema, pushing NDJSON to a table's ingress endpoint, polling completion
// tokens, and ad-hoc queries. It knows nothing of Postgres.
//
// A Client is safe for concurrent use. Requests are retried by
// go-retryablehttp, bounded in count and time, only on transient failures
// (no response, 408, 429, 502, 503, 504). See API.md in the project's shared
// notes for the server behaviour this client is written against.
package feldera

import (
	"encoding/json"
	"net/url"
	"strings"
)

// Pipeline is the part of GET /v0/pipelines/{name} the connector reads.
type Pipeline struct {
	Name                    string       `json:"name"`
	DeploymentStatus        string       `json:"deployment_status"`
	DeploymentDesiredStatus string       `json:"deployment_desired_status,omitempty"`
	DeploymentID            *string      `json:"deployment_id"`
	ProgramStatus           string       `json:"program_status,omitempty"`
	ProgramVersion          int64        `json:"program_version,omitempty"`
	ProgramInfo             *ProgramInfo `json:"program_info"`
	RuntimeConfig           *RuntimeConf `json:"runtime_config,omitempty"`
}

// RuntimeConf is the part of the pipeline's runtime configuration that says
// which delivery guarantee survives a Feldera restart.
type RuntimeConf struct {
	// FaultTolerance is read the way Feldera reads it: see
	// FaultTolerance.Model. Nil when the field is absent (none).
	FaultTolerance *FaultTolerance `json:"fault_tolerance,omitempty"`
}

// ProgramInfo holds the compiled program's schema; nil until compiled.
type ProgramInfo struct {
	Schema ProgramSchema `json:"schema"`
}

// ProgramSchema lists the program's tables (inputs) and views (outputs).
type ProgramSchema struct {
	Inputs  []Relation `json:"inputs"`
	Outputs []Relation `json:"outputs"`
}

// Relation is a table or view in the compiled schema.
type Relation struct {
	Name          string   `json:"name"`
	CaseSensitive bool     `json:"case_sensitive"`
	Fields        []Field  `json:"fields"`
	Materialized  bool     `json:"materialized"`
	PrimaryKey    []string `json:"primary_key"`
	// Properties are the table's WITH (...) properties ('append_only',
	// 'materialized', connectors' …), by name.
	Properties map[string]Property `json:"properties,omitempty"`
}

// Property is one WITH property. Feldera also sends where in the
// program it was written, which does not matter here.
type Property struct {
	Value string `json:"value"`
}

// Field is a column of a relation.
type Field struct {
	Name          string     `json:"name"`
	CaseSensitive bool       `json:"case_sensitive"`
	ColumnType    ColumnType `json:"columntype"`
	Default       *string    `json:"default,omitempty"`
}

// ColumnType is Feldera's SQL type of a column (feldera-types,
// program_schema.rs ColumnType): Component is an ARRAY's element type,
// Key and Value a MAP's; Fields are a ROW's members, kept as Feldera
// sends them (the compiler writes them in more than one form), since
// pgfeldera only compares them.
type ColumnType struct {
	Type      string          `json:"type"`
	Nullable  bool            `json:"nullable"`
	Precision *int            `json:"precision,omitempty"`
	Scale     *int            `json:"scale,omitempty"`
	Component *ColumnType     `json:"component,omitempty"`
	Key       *ColumnType     `json:"key,omitempty"`
	Value     *ColumnType     `json:"value,omitempty"`
	Fields    json.RawMessage `json:"fields,omitempty"`
}

// Canonical returns the canonical form of an identifier: as written when
// quoted (case-sensitive), else folded to lower case, as Feldera does.
func Canonical(name string, caseSensitive bool) string {
	if caseSensitive {
		return name
	}
	return strings.ToLower(name)
}

// CanonicalName is the relation's canonical identifier.
func (r Relation) CanonicalName() string { return Canonical(r.Name, r.CaseSensitive) }

// CanonicalName is the field's canonical identifier.
func (f Field) CanonicalName() string { return Canonical(f.Name, f.CaseSensitive) }

// Field returns the field whose canonical name matches name under Feldera's
// rule: exact for a case-sensitive field, case-insensitive otherwise.
func (r Relation) Field(name string) (Field, bool) {
	for _, f := range r.Fields {
		if f.CaseSensitive && f.Name == name {
			return f, true
		}
	}
	for _, f := range r.Fields {
		if !f.CaseSensitive && strings.EqualFold(f.Name, name) {
			return f, true
		}
	}
	return Field{}, false
}

// Input returns the table whose canonical name matches name, using the same
// rule as Feldera's catalog: a quoted name ("Foo") is exact, an unquoted one
// is folded to lower case.
func (s ProgramSchema) Input(name string) (Relation, bool) {
	want := TableIdent(name)
	for _, r := range s.Inputs {
		if r.CanonicalName() == want {
			return r, true
		}
	}
	return Relation{}, false
}

// TableIdent returns the canonical identifier of a table name as a user
// writes it: "Quoted" keeps its case without the quotes, anything else is
// folded to lower case.
func TableIdent(name string) string {
	if len(name) >= 2 && name[0] == '"' && name[len(name)-1] == '"' {
		return strings.ReplaceAll(name[1:len(name)-1], `""`, `"`)
	}
	return strings.ToLower(name)
}

// URLName returns the table name as it must appear in an ingress URL path
// segment: a canonical name that is not all lower case is quoted, and the
// result is percent-encoded.
func URLName(canonical string) string {
	n := canonical
	if n != strings.ToLower(n) {
		n = `"` + strings.ReplaceAll(n, `"`, `""`) + `"`
	}
	return url.PathEscape(n)
}

// SQLIdent quotes a canonical identifier for use in an ad-hoc query.
func SQLIdent(canonical string) string {
	return `"` + strings.ReplaceAll(canonical, `"`, `""`) + `"`
}

// Stats is the part of GET /stats a connector reads.
type Stats struct {
	GlobalMetrics GlobalMetrics     `json:"global_metrics"`
	Inputs        []InputStats      `json:"inputs"`
	Outputs       []json.RawMessage `json:"outputs"`
	// PermanentCheckpointErrors says why no checkpoint can succeed until
	// the pipeline's configuration changes ("StorageRequired",
	// "EnterpriseFeature", an input endpoint without fault tolerance);
	// empty when checkpoints can succeed.
	PermanentCheckpointErrors []json.RawMessage `json:"permanent_checkpoint_errors,omitempty"`
}

// InputStats is an entry of /stats inputs: an input endpoint (an HTTP
// ingress endpoint is named "<table>.api-ingress-<hash>"), how many of
// its records wait in its buffer, not yet fed to a step, and how many it
// took since the pipeline process created it (total_records: counted as
// each parsed piece of a request body is queued, so a request cut short
// counts the records of it Feldera kept; stats.rs,
// InputEndpointMetrics::total_records and add_buffered).
type InputStats struct {
	EndpointName string `json:"endpoint_name"`
	Metrics      struct {
		BufferedRecords uint64 `json:"buffered_records"`
		BufferedBytes   uint64 `json:"buffered_bytes"`
		TotalRecords    uint64 `json:"total_records"`
	} `json:"metrics"`
}

// IngressTotals is, per canonical table, how many records its HTTP
// ingress endpoints took since the pipeline process started
// (total_records summed over the table's endpoints: one per format).
func (s *Stats) IngressTotals() map[string]uint64 {
	out := map[string]uint64{}
	for _, in := range s.Inputs {
		if i := strings.LastIndex(in.EndpointName, ".api-ingress-"); i > 0 {
			out[TableIdent(in.EndpointName[:i])] += in.Metrics.TotalRecords
		}
	}
	return out
}

// IngressBuffered is how many records the HTTP ingress endpoints of the
// given canonical tables hold that no step took yet. An endpoint is named
// after the path segment as sent (server.rs, input_endpoint): a quoted
// table's keeps its quotes, so the name is compared as an identifier.
func (s *Stats) IngressBuffered(tables map[string]bool) uint64 {
	n, _ := s.IngressBufferedAll(tables)
	return n
}

// IngressBufferedAll is IngressBuffered with the bytes as well.
func (s *Stats) IngressBufferedAll(tables map[string]bool) (records, bytes uint64) {
	for _, in := range s.Inputs {
		if i := strings.LastIndex(in.EndpointName, ".api-ingress-"); i > 0 && tables[TableIdent(in.EndpointName[:i])] {
			records += in.Metrics.BufferedRecords
			bytes += in.Metrics.BufferedBytes
		}
	}
	return records, bytes
}

// GlobalMetrics is /stats global_metrics: IncarnationUUID changes on every
// restart of the pipeline process, including one in place that keeps the
// deployment_id.
type GlobalMetrics struct {
	IncarnationUUID string `json:"incarnation_uuid"`
	State           string `json:"state"`
	// TransactionStatus is NoTransaction, TransactionInProgress or
	// CommitInProgress; TransactionID the running or committing
	// transaction's ID (0: none). A commit has finished once the ID
	// differs from the one it committed (DURABILITY.md §1.3).
	TransactionStatus string `json:"transaction_status"`
	TransactionID     int64  `json:"transaction_id"`
	// TotalProcessedRecords grows as steps outside a transaction, and
	// commits, process input; CommitProgress is set while a commit runs
	// (refreshed about once a second: operators done, in progress and
	// left, and the records of those in progress), null otherwise.
	// TransactionMsecs is the time in the current phase.
	TotalProcessedRecords uint64 `json:"total_processed_records"`
	// TotalInitiatedSteps counts the steps begun, the one in progress
	// included: whatever a query showed before it was read came from a
	// step that a checkpoint of at least this many steps holds, in the
	// same process (stats.rs, total_initiated_steps).
	TotalInitiatedSteps uint64          `json:"total_initiated_steps"`
	CommitProgress      json.RawMessage `json:"commit_progress,omitempty"`
	TransactionMsecs    *int64          `json:"transaction_msecs,omitempty"`
	// TransactionInitiators says who holds the transaction: the API
	// ("Started", "Committed" or null) and input connectors (Delta,
	// Iceberg, datagen with transaction_mode), by endpoint name.
	TransactionInitiators *TransactionInitiators `json:"transaction_initiators,omitempty"`
}

// TransactionInitiators is /stats global_metrics.transaction_initiators.
type TransactionInitiators struct {
	TransactionID         *int64                     `json:"transaction_id"`
	InitiatedByAPI        *string                    `json:"initiated_by_api"`
	InitiatedByConnectors map[string]json.RawMessage `json:"initiated_by_connectors"`
}

// Checkpoint is an entry of GET /checkpoints: Steps is the circuit's step
// count when it was taken, so it covers every token completed at a step ≤
// Steps.
type Checkpoint struct {
	UUID             string `json:"uuid"`
	Identifier       string `json:"identifier,omitempty"`
	Fingerprint      uint64 `json:"fingerprint"`
	Size             uint64 `json:"size,omitempty"`
	Steps            uint64 `json:"steps"`
	ProcessedRecords uint64 `json:"processed_records"`
}
