package ingress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/sqlvalue"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
	"github.com/pgfeldera/pgfeldera/internal/jsonscan"
)

// Args are an ingress request's format parameters. EndpointKey is the
// whole query, canonical: with the path segment it names the endpoint.
type Args struct {
	array        bool
	raw          bool
	EndpointKey  string
	formatIsJSON bool
}

// ParseArgs reads an ingress request's query. A status of 0 means it is
// good; otherwise the request is answered status, with the error code
// "ConfigError."+code and message msg.
func ParseArgs(q url.Values) (Args, int, string, string) {
	var a Args
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
	a.EndpointKey = strings.Join(keys, "&")
	return a, 0, "", ""
}

// ParseError is one bad event of a body, as a 400 ParseErrors answer
// lists it.
type ParseError struct {
	Description string  `json:"description"`
	EventNumber int     `json:"event_number"`
	Field       *string `json:"field"`
	InvalidText *string `json:"invalid_text"`
}

// FirstHalf keeps the lines of body that hold the first half of its good
// events (PartialThen503).
func FirstHalf(t *table.Table, body []byte, args Args) []byte {
	ops, _, _ := ParseBody(t, body, args, 0)
	keep := len(ops) / 2
	var out []byte
	for _, line := range bytes.SplitAfter(body, []byte{'\n'}) {
		if keep == 0 {
			break
		}
		o, _, _ := ParseBody(t, line, args, 0)
		if len(o) > keep {
			break
		}
		keep -= len(o)
		out = append(out, line...)
	}
	return out
}

// ParseBody parses NDJSON (or arrays with array=true) into commands; bad
// events are reported and skipped, good ones kept, as Feldera does. A
// syntactically broken document ends the parse.
//
// event is how many events came before body (a request parsed chunk by
// chunk numbers its events across chunks); the count after it returns.
func ParseBody(t *table.Table, body []byte, a Args, event int) ([]table.Op, []ParseError, int) {
	var ops []table.Op
	var errs []ParseError
	if !a.formatIsJSON {
		// format defaults to csv: a JSON body is not CSV the double can read.
		for _, line := range bytes.Split(body, []byte{'\n'}) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			event++
			errs = append(errs, ParseError{Description: "felderatest: CSV input is not supported (did you forget format=json? Feldera's default is csv)", EventNumber: event})
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

// parseStream is ParseBody through encoding/json's stream decoder: the
// reference the line-by-line path agrees with (FuzzParseBody).
func parseStream(t *table.Table, body []byte, a Args, event int) ([]table.Op, []ParseError, int) {
	var ops []table.Op
	var errs []ParseError
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			event++
			errs = append(errs, ParseError{Description: "failed to parse JSON: " + err.Error(), EventNumber: event})
			break
		}
		if a.array {
			var elems []json.RawMessage
			if err := json.Unmarshal(v, &elems); err != nil {
				event++
				errs = append(errs, ParseError{Description: "expected an array: " + err.Error(), EventNumber: event})
				continue
			}
			var arrOps []table.Op
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
func addEvent(t *table.Table, v json.RawMessage, raw bool, event int, ops []table.Op, errs []ParseError) ([]table.Op, []ParseError) {
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
		return nil, fmt.Errorf("invalid type: %s, expected an insert/delete/update object", sqlvalue.Describe(bytes.TrimSpace(v)))
	}
	return env, nil
}

// ndjsonLines splits a body whose every non-blank line is exactly one
// valid JSON value into those values: the events encoding/json's stream
// decoder would read from it, found without decoding them. Any other body
// (values spanning or sharing lines, invalid JSON, arrays) is not ok, and
// goes through the decoder.
func ndjsonLines(body []byte, a Args) ([]json.RawMessage, bool) {
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

func toParseError(err error, event int) ParseError {
	pe := ParseError{Description: err.Error(), EventNumber: event}
	if fe, ok := err.(*table.FieldError); ok {
		f := fe.Field
		pe.Field = &f
	}
	return pe
}

// parseEvent reads one {"insert"|"delete"|"update": R} envelope (or, with
// raw, one record to insert). Commands run delete, insert, update.
func parseEvent(t *table.Table, v json.RawMessage, raw bool) ([]table.Op, error) {
	if raw {
		vals, set, err := t.ParseRecord(v, 'i')
		if err != nil {
			return nil, err
		}
		return []table.Op{{Kind: 'i', Row: vals, Set: set}}, nil
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
	var out []table.Op
	for _, kind := range []struct {
		name string
		k    byte
	}{{"delete", 'd'}, {"insert", 'i'}, {"update", 'u'}} {
		rec, ok := env[kind.name]
		if !ok {
			continue
		}
		if kind.k == 'u' && !t.Keyed() {
			return nil, fmt.Errorf("update operation is not supported on this stream")
		}
		vals, set, err := t.ParseRecord(rec, kind.k)
		if err != nil {
			return nil, err
		}
		out = append(out, table.Op{Kind: kind.k, Row: vals, Set: set})
	}
	return out, nil
}
