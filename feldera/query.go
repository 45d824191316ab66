package feldera

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Query runs an ad-hoc SQL query and calls fn with each result row, a JSON
// object keyed by column name. The answer is read as NDJSON, or as one JSON
// array of objects. An error line ({"error": ...}) after rows ends the query
// with an error: a partial answer is never a complete one.
func (c *Client) Query(ctx context.Context, sql string, fn func(row json.RawMessage) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := c.send(ctx, c.stream, http.MethodGet, "/query", "sql="+url.QueryEscape(sql)+"&format=json", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkResponse("GET query", resp); err != nil {
		return err
	}
	stalled := fmt.Errorf("feldera: query answer stalled: no data for %s", c.idle)
	timer := time.AfterFunc(c.idle, func() { cancel(stalled) })
	defer timer.Stop()
	err = decodeRows(&idleReader{r: resp.Body, timer: timer, d: c.idle}, fn)
	if err != nil && context.Cause(ctx) == stalled {
		return stalled
	}
	return err
}

// idleReader restarts its timer on every read that returns data.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}

func decodeRows(r io.Reader, fn func(json.RawMessage) error) error {
	br := bufio.NewReader(r)
	first, err := peekNonSpace(br)
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return fmt.Errorf("feldera: read query answer: %w", err)
	}
	dec := json.NewDecoder(br)
	array := first == '['
	if array {
		if _, err := dec.Token(); err != nil {
			return fmt.Errorf("feldera: query answer: %w", err)
		}
	}
	for array && dec.More() || !array {
		var row json.RawMessage
		if err := dec.Decode(&row); err == io.EOF && !array {
			return nil
		} else if err != nil {
			return fmt.Errorf("feldera: query answer: %w", err)
		}
		if msg, ok := errorLine(row); ok {
			return &APIError{Op: "GET query", StatusCode: http.StatusOK, Code: "AdHocQueryError", Message: msg}
		}
		if err := fn(row); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("feldera: query answer: unterminated array: %w", err)
	}
	return nil
}

func peekNonSpace(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		if b != ' ' && b != '\n' && b != '\r' && b != '\t' {
			return b, br.UnreadByte()
		}
	}
}

// errorLine recognises the {"error": "..."} line Feldera appends when a
// query fails after streaming has begun.
func errorLine(row json.RawMessage) (string, bool) {
	if !bytes.Contains(row, []byte(`"error"`)) {
		return "", false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(row, &m) != nil || len(m) != 1 {
		return "", false
	}
	raw, ok := m["error"]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	return s, true
}
