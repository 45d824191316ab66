package feldera

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Defaults for Config.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultRetryMax       = 4
	DefaultRetryWaitMin   = 200 * time.Millisecond
	DefaultRetryWaitMax   = 5 * time.Second
	DefaultPollInterval   = 20 * time.Millisecond
	DefaultPollMax        = 500 * time.Millisecond
	// DefaultIdleConnTimeout closes a kept-alive connection idle this
	// long, before the server does: Feldera's pipeline manager (actix-web
	// defaults, crates/pipeline-manager/src/api/main.rs) closes one idle
	// for 5 s and the pipeline's own server (crates/adapters/src/server.rs,
	// keep_alive) for 30 s. A request written on a connection the server
	// is closing gets no answer: for ingress, an unclear outcome that
	// costs the fence.
	DefaultIdleConnTimeout = 3 * time.Second
)

// IngressQuery is the query string of every ingress request. format defaults
// to csv on the server, so it is always written out.
const IngressQuery = "format=json&update_format=insert_delete"

// Config configures a Client.
type Config struct {
	URL      string // base URL, e.g. http://localhost:8080
	Pipeline string // pipeline name
	APIKey   string // sent as a Bearer token; never logged

	// RequestTimeout bounds one HTTP attempt; 0 = DefaultRequestTimeout. A
	// query's answer can stream for longer: there it bounds the wait for
	// the response headers and each silence in the body.
	RequestTimeout time.Duration
	RetryMax       int // retries per request on transient errors; 0 = DefaultRetryMax, <0 = none
	RetryWaitMin   time.Duration
	RetryWaitMax   time.Duration

	// HTTPClient is the transport to use; nil means a pooled keep-alive client.
	HTTPClient *http.Client
	// IdleConnTimeout closes pooled connections idle this long (0:
	// DefaultIdleConnTimeout); it applies to the default transport and
	// to a given *http.Transport that sets none.
	IdleConnTimeout time.Duration
	Logger          *slog.Logger
}

// Client talks to one Feldera pipeline.
type Client struct {
	base     *url.URL
	pipeline string
	apiKey   string
	http     *retryablehttp.Client // retries transient failures
	once     *retryablehttp.Client // never retries: ingress
	stream   *retryablehttp.Client // retries; no bound on the whole answer: query
	idle     time.Duration         // longest silence in a streamed answer
	logger   *slog.Logger
}

// New returns a client for the configured pipeline.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("feldera: URL %q is not an http(s) URL with a host", RedactURL(cfg.URL))
	}
	if cfg.Pipeline == "" {
		return nil, errors.New("feldera: pipeline name is empty")
	}
	cfg = withDefaults(cfg)
	hc := pooledClient(cfg)
	rc := retryablehttp.NewClient()
	rc.HTTPClient = hc
	rc.RetryMax = cfg.RetryMax
	rc.RetryWaitMin = cfg.RetryWaitMin
	rc.RetryWaitMax = cfg.RetryWaitMax
	rc.Logger = nil
	rc.CheckRetry = checkRetry
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	logger := cfg.Logger.With("component", "feldera")
	rc.RequestLogHook = func(_ retryablehttp.Logger, req *http.Request, attempt int) {
		if attempt > 0 {
			logger.Warn("feldera: retrying request", "method", req.Method, "path", req.URL.Path, "attempt", attempt)
		}
	}
	once := retryablehttp.NewClient()
	once.HTTPClient, once.RetryMax, once.Logger = hc, 0, nil
	once.CheckRetry = func(context.Context, *http.Response, error) (bool, error) { return false, nil }
	once.ErrorHandler = retryablehttp.PassthroughErrorHandler
	stream := streamClient(hc, rc, cfg)
	return &Client{base: u, pipeline: cfg.Pipeline, apiKey: cfg.APIKey, http: rc, once: once, stream: stream,
		idle: cfg.RequestTimeout, logger: logger}, nil
}

// withDefaults fills cfg's zero fields with the defaults, so New works
// from one complete Config.
func withDefaults(cfg Config) Config {
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = DefaultRetryMax
	} else if cfg.RetryMax < 0 {
		cfg.RetryMax = 0
	}
	if cfg.RetryWaitMin == 0 {
		cfg.RetryWaitMin = DefaultRetryWaitMin
	}
	if cfg.RetryWaitMax == 0 {
		cfg.RetryWaitMax = DefaultRetryWaitMax
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.IdleConnTimeout <= 0 {
		cfg.IdleConnTimeout = DefaultIdleConnTimeout
	}
	return cfg
}

// pooledClient returns the client for every request but queries: the given
// one or a pooled keep-alive one, with idle connections closed before the
// server closes them, and each attempt bounded by RequestTimeout.
func pooledClient(cfg Config) *http.Client {
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		tr.IdleConnTimeout = cfg.IdleConnTimeout
		hc = &http.Client{Transport: tr}
	} else if t, ok := hc.Transport.(*http.Transport); ok && t.IdleConnTimeout == 0 {
		t.IdleConnTimeout = cfg.IdleConnTimeout
	}
	hc.Timeout = cfg.RequestTimeout
	return hc
}

// streamClient returns the retrying client for queries, on hc's transport
// (a copy where it can): an answer may stream for long, so it has no bound
// as a whole.
func streamClient(hc *http.Client, rc *retryablehttp.Client, cfg Config) *retryablehttp.Client {
	// A query's answer (every key of a large table, for a resnapshot's
	// retraction or verify) may take longer than any fixed bound; it gets
	// a header timeout per attempt and an idle timer instead (Query).
	var tr http.RoundTripper = http.DefaultTransport.(*http.Transport).Clone()
	tr.(*http.Transport).IdleConnTimeout = cfg.IdleConnTimeout
	if t, ok := hc.Transport.(*http.Transport); ok {
		tr = t.Clone()
	} else if hc.Transport != nil {
		tr = hc.Transport
	}
	if t, ok := tr.(*http.Transport); ok {
		t.ResponseHeaderTimeout = cfg.RequestTimeout
	}
	stream := retryablehttp.NewClient()
	stream.HTTPClient = &http.Client{Transport: tr}
	stream.RetryMax, stream.RetryWaitMin, stream.RetryWaitMax = rc.RetryMax, rc.RetryWaitMin, rc.RetryWaitMax
	stream.Logger, stream.CheckRetry, stream.ErrorHandler, stream.RequestLogHook = nil, checkRetry, retryablehttp.PassthroughErrorHandler, rc.RequestLogHook
	return stream
}

// checkRetry retries only when the server surely did not reject the request
// for good: no response, or a transient status.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return true, nil
	}
	return transientStatus(resp.StatusCode), nil
}

func transientStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func (c *Client) endpoint(path string, query string) string {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + "/v0/pipelines/" + url.PathEscape(c.pipeline) + path
	u.Path, _ = url.PathUnescape(u.RawPath)
	u.RawQuery = query
	return u.String()
}

func (c *Client) do(ctx context.Context, method, path, query string, body []byte) (*http.Response, error) {
	return c.send(ctx, c.http, method, path, query, body)
}

func (c *Client) send(ctx context.Context, hc *retryablehttp.Client, method, path, query string, body []byte) (*http.Response, error) {
	var rb any
	if body != nil {
		rb = body
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, c.endpoint(path, query), rb)
	if err != nil {
		return nil, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &APIError{Op: method + " " + path, Err: scrub(err, c.apiKey)}
	}
	return resp, nil
}

// scrub makes sure a transport error never carries the API key.
func scrub(err error, key string) error {
	if key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), key, "[redacted]"))
}

// Pipeline reads the pipeline's status and compiled schema.
func (c *Client) Pipeline(ctx context.Context) (*Pipeline, error) {
	var p Pipeline
	if err := c.getJSON(ctx, "GET pipeline", "", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Ingress pushes an NDJSON body of insert/delete events to a table and
// returns the completion token that covers it. table is the canonical name.
//
// A 200 means the body was read and queued, not processed: wait for the
// token before acknowledging the source.
//
// Ingress is never retried here. A request that got no answer (or a 502,
// 503, 504, 408: see IsOutcomeUnknown) may still be queued by Feldera
// later, after anything sent meanwhile, where its old rows would overwrite
// newer ones. The caller must fence: send nothing newer until such a request
// can no longer land, then replay it (harmless, because the target tables
// have primary keys: a replayed insert is an upsert, a replayed delete a
// no-op). A 400 ParseErrors may have ingested the good lines: treat it as
// fatal and redeliver, never as "nothing happened".
func (c *Client) Ingress(ctx context.Context, table string, body []byte) (string, error) {
	op := "POST ingress/" + table
	resp, err := c.send(traceWrote(ctx), c.once, http.MethodPost, "/ingress/"+URLName(table), IngressQuery, body)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if err := checkResponse(op, resp); err != nil {
		return "", err
	}
	var tr struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil || tr.Token == "" {
		return "", &APIError{Op: op, StatusCode: resp.StatusCode, Message: "response has no completion token"}
	}
	return tr.Token, nil
}

type wroteKey struct{}

// WithBodyWritten returns a context whose ingress request calls fn once
// its last byte (headers and body) was written to the connection. An
// ingress fence counts from then: a large body can take long to upload.
func WithBodyWritten(ctx context.Context, fn func(at time.Time)) context.Context {
	return context.WithValue(ctx, wroteKey{}, fn)
}

func traceWrote(ctx context.Context) context.Context {
	fn, _ := ctx.Value(wroteKey{}).(func(time.Time))
	if fn == nil {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			fn(time.Now())
		}
	}})
}

// Completion reports whether the records covered by token are processed
// and delivered to every output. A token of an earlier incarnation of the
// pipeline returns an error for which IsPipelineRestarted is true.
func (c *Client) Completion(ctx context.Context, token string) (bool, error) {
	done, _, err := c.CompletionStep(ctx, token)
	return done, err
}

// CompletionStep is Completion that also returns, for a complete token,
// the step that processed its records (comparable with Checkpoint.Steps).
// step is 0 when Feldera did not say.
func (c *Client) CompletionStep(ctx context.Context, token string) (done bool, step uint64, err error) {
	// The token is base64 and may hold '+', '/' and '=': always percent-encode.
	resp, err := c.do(ctx, http.MethodGet, "/completion_status", "token="+url.QueryEscape(token), nil)
	if err != nil {
		return false, 0, err
	}
	defer resp.Body.Close()
	if err := checkResponse("GET completion_status", resp); err != nil {
		return false, 0, err
	}
	var st struct {
		Status string  `json:"status"`
		Step   *uint64 `json:"step"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return false, 0, fmt.Errorf("feldera: decode completion status: %w", err)
	}
	switch st.Status {
	case "complete":
		if st.Step != nil {
			step = *st.Step
		}
		return true, step, nil
	case "inprogress":
		return false, 0, nil
	}
	return false, 0, &APIError{Op: "GET completion_status", StatusCode: resp.StatusCode, Message: fmt.Sprintf("unknown completion status %q", st.Status)}
}

// WaitComplete polls the token until it is complete, ctx ends, or the server
// answers with an error. The poll interval starts at DefaultPollInterval and
// doubles up to DefaultPollMax.
func (c *Client) WaitComplete(ctx context.Context, token string) error {
	_, err := c.WaitCompleteStep(ctx, token)
	return err
}

// WaitCompleteStep is WaitComplete returning the step that completed the
// token (see CompletionStep).
func (c *Client) WaitCompleteStep(ctx context.Context, token string) (uint64, error) {
	wait := DefaultPollInterval
	for {
		done, step, err := c.CompletionStep(ctx, token)
		if err != nil {
			return 0, err
		}
		if done {
			return step, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("feldera: wait for completion: %w", ctx.Err())
		case <-t.C:
		}
		if wait *= 2; wait > DefaultPollMax {
			wait = DefaultPollMax
		}
	}
}

// getJSON GETs path and decodes the 2xx answer into v.
func (c *Client) getJSON(ctx context.Context, op, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkResponse(op, resp); err != nil {
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("feldera: decode %s: %w", op, err)
	}
	return nil
}
