// Package oracle is what the tests know to be right about the Feldera
// double's state: a Postgres table compared with the double's, row by
// row and every shared column (the check behind "nothing lost"), and
// pgbench's invariant. Only tests import it; the binaries do not link it.
package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/jsonscan"
)

// Result is a comparison of one table.
type Result struct {
	Postgres, Feldera int      // row counts
	Missing           []string // rows Postgres has and Feldera lacks (or holds with other values)
	Extra             []string // rows Feldera has and Postgres lacks
}

// Equal reports whether the tables hold the same rows.
func (r Result) Equal() bool { return len(r.Missing) == 0 && len(r.Extra) == 0 }

// String describes the difference ("" when equal), at most 20 rows each way.
func (r Result) String() string {
	if r.Equal() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "postgres %d rows, feldera %d rows\n", r.Postgres, r.Feldera)
	for i, m := range r.Missing {
		if i == 20 {
			fmt.Fprintf(&b, "  … %d more missing\n", len(r.Missing)-20)
			break
		}
		fmt.Fprintf(&b, "  missing in feldera: %s\n", m)
	}
	for i, x := range r.Extra {
		if i == 20 {
			fmt.Fprintf(&b, "  … %d more extra\n", len(r.Extra)-20)
			break
		}
		fmt.Fprintf(&b, "  extra in feldera:   %s\n", x)
	}
	return b.String()
}

// canon re-encodes a JSON object with sorted keys and exact numbers,
// keeping only the keys keep accepts (nil keeps all).
func canon(raw []byte, keep map[string]bool) (string, error) {
	var buf [16]jsonscan.Member
	if members, ok := jsonscan.Object(raw, buf[:0]); ok {
		m := make(map[string]json.RawMessage, len(members))
		for _, mb := range members {
			m[mb.Key] = mb.Value
		}
		return canonFields(m, keep)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	return canonFields(m, keep)
}

// canonFields is canon of an object already split into its fields. A
// string is re-encoded (Postgres and Go escape differently); a number,
// true, false or null is its literal, so numbers stay exact; an object or
// array goes through the generic encoder.
func canonFields(m map[string]json.RawMessage, keep map[string]bool) (string, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if keep == nil || keep[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		v, err := canonValue(m[k])
		if err != nil {
			return "", fmt.Errorf("field %s: %w", k, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.String(), nil
}

func canonValue(raw json.RawMessage) ([]byte, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 {
		return nil, fmt.Errorf("empty value")
	}
	switch v[0] {
	case '"':
		if jsonscan.Plain(v) {
			return v, nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, err
		}
		return json.Marshal(s)
	case '{', '[':
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		var x any
		if err := d.Decode(&x); err != nil {
			return nil, err
		}
		return json.Marshal(x)
	default:
		return v, nil
	}
}

// Compare reads pgTable (as to_jsonb rows) and felTable from the double and
// compares the columns Postgres has. Values must be comparable as JSON:
// use integer, text, boolean and numeric columns (numeric with the same
// scale in both).
func Compare(ctx context.Context, db *pgx.Conn, pgTable string, fel *felderatest.Server, felTable string) (Result, error) {
	var r Result
	rows, err := db.Query(ctx, "SELECT to_jsonb(t)::text FROM "+pgTable+" t")
	if err != nil {
		return r, err
	}
	var want []string
	cols := map[string]bool{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return r, err
		}
		if len(cols) == 0 {
			var m map[string]json.RawMessage
			json.Unmarshal([]byte(s), &m)
			for k := range m {
				cols[k] = true
			}
		}
		c, err := canon([]byte(s), nil)
		if err != nil {
			rows.Close()
			return r, err
		}
		want = append(want, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, err
	}
	var got []string
	for _, row := range fel.Rows(felTable) {
		keep := cols
		if len(cols) == 0 {
			keep = nil
		}
		c, err := canonFields(row, keep)
		if err != nil {
			return r, err
		}
		got = append(got, c)
	}
	r.Postgres, r.Feldera = len(want), len(got)
	r.Missing, r.Extra = minus(want, got), minus(got, want)
	return r, nil
}

// minus returns the multiset a − b, sorted.
func minus(a, b []string) []string {
	n := map[string]int{}
	for _, x := range b {
		n[x]++
	}
	var out []string
	for _, x := range a {
		if n[x] > 0 {
			n[x]--
			continue
		}
		out = append(out, x)
	}
	sort.Strings(out)
	return out
}
