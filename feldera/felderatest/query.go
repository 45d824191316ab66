package felderatest

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
)

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
