package feldera

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Error codes the connector branches on.
const (
	CodePipelineRestarted = "PipelineRestarted"
	CodeParseErrors       = "ParseErrors"
	CodeAdHocQueryError   = "AdHocQueryError"
	CodeUnknownInput      = "UnknownInputStream"

	CodeTransactionInProgress   = "TransactionInProgress"
	CodeNoTransactionInProgress = "NoTransactionInProgress"
)

// APIError is a failed request: a non-2xx answer (StatusCode, and Code and
// Message from Feldera's {message,error_code,details} body when there was
// one) or no answer at all (Err set, StatusCode 0).
type APIError struct {
	Op         string
	StatusCode int
	Code       string
	Message    string
	Details    json.RawMessage
	Err        error
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("feldera: ")
	b.WriteString(e.Op)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
		return b.String()
	}
	fmt.Fprintf(&b, ": %d", e.StatusCode)
	if e.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		msg := e.Message
		if len(msg) > 500 {
			msg = msg[:500] + "…"
		}
		b.WriteString(": ")
		b.WriteString(msg)
	}
	return b.String()
}

func (e *APIError) Unwrap() error { return e.Err }

// Fatal says records Feldera could not parse end the process: a retry
// sends the same records again (fatal.Is).
func (e *APIError) Fatal() bool {
	return e.Code == CodeParseErrors || strings.HasSuffix(e.Code, "."+CodeParseErrors)
}

// IsTransient reports whether err is a failure worth retrying later: no
// response, or status 408, 429, 502, 503 or 504. The server may still have
// applied the request.
func IsTransient(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Err != nil || transientStatus(ae.StatusCode)
}

// Codes of answers Feldera gives before it reads any of an ingress
// request's body (DURABILITY.md §3; API.md §0): the request can never be
// applied later.
var refusedUnread = map[string]bool{
	"RestoreInProgress":              true, // replaying the journal: a new endpoint is refused
	"BootstrapInProgress":            true, // bootstrapping: a new endpoint is refused
	"Initializing":                   true, // no controller yet
	"AwaitingApproval":               true,
	"Suspended":                      true,
	"PipelineInteractionNotDeployed": true, // the manager did not forward it
	"ApiConnectionLimit":             true, // 429: no endpoint was given to it
}

// IsRefusedUnread reports whether Feldera refused a request before reading
// it: a 503 or 429 whose error code says so. Such a request needs no fence.
func IsRefusedUnread(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Err != nil {
		return false
	}
	code := ae.Code
	if i := strings.LastIndexByte(code, '.'); i >= 0 {
		code = code[i+1:]
	}
	return refusedUnread[code]
}

// IsOutcomeUnknown reports whether a failed request may still be applied by
// the server: no answer at all, or a gateway/timeout status (408, 502, 503,
// 504; Feldera's manager answers 503 after 30 s while the pipeline may
// still queue the body), unless the answer's code says the request was
// refused before anything was read (IsRefusedUnread).
func IsOutcomeUnknown(err error) bool { return IsTransient(err) && !IsRefusedUnread(err) }

// IsPipelineRestarted reports whether Feldera says the pipeline restarted
// since the token was issued: its state since then is lost.
func IsPipelineRestarted(err error) bool {
	return hasCode(err, CodePipelineRestarted)
}

func hasCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.Code == code || strings.HasSuffix(ae.Code, "."+code))
}

// IsCheckpointUnsupported reports Feldera's 501 EnterpriseFeature answer to
// POST /checkpoint: this Feldera cannot checkpoint (the OSS edition).
func IsCheckpointUnsupported(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.StatusCode == http.StatusNotImplemented || ae.Code == "EnterpriseFeature")
}

// IsRestarted reports an answer that means the pipeline process restarted
// (or is terminating) since the token or request was made: 410
// PipelineRestarted, 410 UnknownEndpointInCompletionToken, 400
// IncarnationUuidMismatch, 410 Terminating. Whatever it had not made
// durable is gone.
func IsRestarted(err error) bool {
	for _, code := range []string{CodePipelineRestarted, "UnknownEndpointInCompletionToken", "IncarnationUuidMismatch", "Terminating"} {
		if hasCode(err, code) {
			return true
		}
	}
	return false
}

// IsTransactionInProgress reports 409 TransactionInProgress: the API
// already holds a transaction (perhaps another client's: they share it).
func IsTransactionInProgress(err error) bool { return hasCode(err, CodeTransactionInProgress) }

// IsNoTransactionInProgress reports 400 NoTransactionInProgress: a commit
// with no open API transaction (never started, already committed, or lost
// in a restart).
func IsNoTransactionInProgress(err error) bool { return hasCode(err, CodeNoTransactionInProgress) }

// IsParseErrors reports a 400 ParseErrors answer to an ingress request.
// Feldera may have ingested the good lines of that request.
func IsParseErrors(err error) bool { return hasCode(err, CodeParseErrors) }

// IsAdHocQueryError reports a query Feldera refused, e.g. a table that is
// neither materialized nor keyed.
func IsAdHocQueryError(err error) bool { return hasCode(err, CodeAdHocQueryError) }

// ErrorCode returns the Feldera error code carried by err, or "" (and
// "transport" for a request with no answer).
func ErrorCode(err error) string {
	var ae *APIError
	if !errors.As(err, &ae) {
		return ""
	}
	if ae.Err != nil {
		return "transport"
	}
	if ae.Code == "" {
		return http.StatusText(ae.StatusCode)
	}
	return ae.Code
}

func checkResponse(op string, resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Op: op, StatusCode: resp.StatusCode}
	var eb struct {
		Message   string          `json:"message"`
		ErrorCode string          `json:"error_code"`
		Details   json.RawMessage `json:"details"`
	}
	if json.Unmarshal(body, &eb) == nil && (eb.ErrorCode != "" || eb.Message != "") {
		e.Code, e.Message, e.Details = eb.ErrorCode, eb.Message, eb.Details
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}

// RedactURL is raw with its password hidden, for logs and errors: the
// one way FELDERA_URL is printed.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
