package felderatest

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/query"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// ---- ad-hoc query ----

func (s *Server) query(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sqlText := q.Get("sql")
	if f := q.Get("format"); f != "json" {
		writeError(w, 400, "InvalidParam", "felderatest: only format=json is supported", nil)
		return
	}
	sel, ok := query.Parse(sqlText)
	if !ok {
		writeError(w, 400, feldera.CodeAdHocQueryError, "Error during query processing: felderatest supports only SELECT cols|*|COUNT(*) FROM t [ORDER BY ...]: "+sqlText, map[string]any{"error": "unsupported query"})
		return
	}
	canon := sel.Table
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Advance(time.Now())
	t, ok := s.tables[canon]
	if !ok {
		writeError(w, 400, feldera.CodeAdHocQueryError, fmt.Sprintf("Error during query processing: Error during planning: table '%s' not found", canon), map[string]any{"error": "table not found"})
		return
	}
	if !t.Queryable() {
		writeError(w, 400, feldera.CodeAdHocQueryError,
			fmt.Sprintf("Error during query processing: Tried to SELECT from a non-materialized source. Make sure `%s` is configured as materialized: use `with ('materialized' = 'true')` for tables, or `create materialized view` for views", canon),
			map[string]any{"error": "non-materialized source"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	rows := table.Snapshot[Row](t)
	if sel.Count() {
		n := len(rows)
		if s.cfg.CountOnly {
			n = s.countOnly[canon] // benchmarks insert distinct keys only
		}
		fmt.Fprintf(w, "{\"count(*)\":%d}\n", n)
		return
	}
	fields, n, ok := sel.Fields(t.Rel)
	if !ok {
		w.Header().Del("Content-Type")
		writeError(w, 400, feldera.CodeAdHocQueryError, fmt.Sprintf("Error during query processing: Schema error: No field named %s", n), map[string]any{"error": "no field"})
		return
	}
	var b bytes.Buffer
	for _, row := range rows {
		query.WriteRow(&b, fields, row)
	}
	w.Write(b.Bytes())
}
