package catalog

import (
	"fmt"
	"strings"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Table maps one Postgres table to one Feldera table.
type Table struct {
	Schema string // Postgres schema, canonical (unquoted names folded down)
	Name   string // Postgres table, canonical
	Dest   string // Feldera table, canonical (see feldera.TableIdent)
}

// Source is the qualified Postgres name, schema.table, quoted where needed.
func (t Table) Source() string {
	return pgvalue.QuoteIdent(t.Schema) + "." + pgvalue.QuoteIdent(t.Name)
}

// ParseTables parses TABLES: comma-separated "pg name[:feldera name]" where
// the Postgres name may be schema-qualified (default schema public) and
// either name may be "quoted" to keep its case. Duplicate sources or
// destinations are an error here only when both names are the same
// table; several sources for one destination (leaf partitions of one root,
// checked at startup against the catalog) are allowed.
func ParseTables(spec string) ([]Table, error) {
	var out []Table
	seenSrc := map[string]bool{}
	for _, item := range splitOutsideQuotes(spec, ',') {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("empty table entry in %q", spec)
		}
		parts := splitOutsideQuotes(item, ':')
		if len(parts) > 2 {
			return nil, fmt.Errorf("table entry %q has more than one ':'", item)
		}
		src := splitOutsideQuotes(strings.TrimSpace(parts[0]), '.')
		var t Table
		var err error
		switch len(src) {
		case 1:
			t.Schema = "public"
			t.Name, err = pgIdent(src[0])
		case 2:
			if t.Schema, err = pgIdent(src[0]); err == nil {
				t.Name, err = pgIdent(src[1])
			}
		default:
			err = fmt.Errorf("%q is not [schema.]table", parts[0])
		}
		if err != nil {
			return nil, fmt.Errorf("table entry %q: %w", item, err)
		}
		t.Dest = t.Name
		if len(parts) == 2 {
			d := strings.TrimSpace(parts[1])
			if d == "" || d == `""` {
				return nil, fmt.Errorf("table entry %q: empty Feldera table name", item)
			}
			t.Dest = feldera.TableIdent(d)
		}
		key := t.Schema + "." + t.Name
		if seenSrc[key] {
			return nil, fmt.Errorf("Postgres table %s is listed twice", key)
		}
		seenSrc[key] = true
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no tables")
	}
	return out, nil
}

// pgIdent canonicalises a Postgres identifier: "quoted" keeps its case,
// unquoted folds to lower case.
func pgIdent(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		n := strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
		if n == "" {
			return "", fmt.Errorf("empty quoted identifier")
		}
		return n, nil
	}
	if s == "" || strings.ContainsAny(s, `" `) {
		return "", fmt.Errorf("bad identifier %q", s)
	}
	return strings.ToLower(s), nil
}

func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	start, inQ := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '"':
			inQ = !inQ
		case s[i] == sep && !inQ:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// Routes numbers the destinations of tables in order of first appearance:
// route r is the outbox buffer, and the POST stream, of one Feldera table.
// Sources that share a destination share its route, so their changes keep
// the stream's order (a row moving between two leaf partitions is a delete
// in one and an insert in the other, and must arrive in that order).
func Routes(tables []Table) (routes []int, n int) {
	seen := map[string]int{}
	for _, t := range tables {
		r, ok := seen[t.Dest]
		if !ok {
			r = len(seen)
			seen[t.Dest] = r
		}
		routes = append(routes, r)
	}
	return routes, len(seen)
}
