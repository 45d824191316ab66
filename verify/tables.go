package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

// Verdict is the comparison of one mapped table.
type Verdict struct {
	Source string `json:"postgres_table"`
	Result
	// Error says why the table could not be compared (then Match is false).
	Error string `json:"error,omitempty"`
}

// Querier is what verify reads of Feldera: the pipeline's schema, and
// its tables through /query. *feldera.Client satisfies it.
type Querier interface {
	setup.Pipeliner
	// Query runs an ad-hoc query and calls fn per result row (a JSON object).
	Query(ctx context.Context, sql string, fn func(row json.RawMessage) error) error
}

// Tables compares each mapped table in Postgres and in Feldera: row counts
// and an order-independent digest of the rows as pgfeldera encodes them,
// read from Postgres in one REPEATABLE READ transaction and from Feldera
// with SELECT * through /query. When a table differs it reads both sides
// again to name up to maxDiffs differing keys. It is meant for a system at
// rest (writes stopped and the connector caught up): a table still being
// written differs by the changes in flight.
//
// It returns an error only when nothing could be compared (configuration,
// connection, schema); a table that cannot be read gets a Verdict with
// Error set.
func Tables(ctx context.Context, cfg setup.Config, sink Querier, maxDiffs int) ([]Verdict, error) {
	p, err := setup.Prepare(ctx, cfg, sink, setup.ForVerify)
	if err != nil {
		return nil, err
	}
	conn, err := replconn.Connect(ctx, cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := snapshot.Begin(ctx, conn, "", replconn.PinnedGUCs); err != nil {
		return nil, err
	}
	var out []Verdict
	for route, g := range p.Groups {
		t := p.Routes[route]
		rels := make([]*decode.Rel, len(g))
		var names []string
		for j, i := range g {
			rels[j] = p.Rels[i]
			names = append(names, p.Targets[i].Qualified())
		}
		v := Verdict{Source: strings.Join(names, ",")}
		res, err := verifyTable(ctx, conn, sink, rels, maxDiffs)
		if err != nil {
			v.Result.Dest = t.Dest.Name
			v.Error = err.Error()
		} else {
			v.Result = res
		}
		out = append(out, v)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}

// verifyTable compares a Feldera table with its sources: one table, or the
// leaf partitions that share it.
func verifyTable(ctx context.Context, conn *pgx.Conn, sink Querier, rels []*decode.Rel, maxDiffs int) (Result, error) {
	rel := rels[0]
	t := rel.Target
	tab, err := New(t.Dest)
	if err != nil {
		return Result{}, err
	}
	var mapped []string
	for _, col := range rel.Cols {
		if col.Field != "" {
			mapped = append(mapped, col.Field)
		}
	}
	tab.Only(mapped)
	var line []byte
	pass := func() error {
		for _, r := range rels {
			// Each leaf in its own column order (a partition attached
			// from a table created apart may differ from its root).
			cols := make([]string, len(r.Cols))
			for i, col := range r.Cols {
				cols[i] = col.Name
			}
			cr := decode.CopyRow{Rel: r}
			if _, err := snapshot.Copy(ctx, conn, snapshot.SourceOf(r.Target), cols, func(row []byte) error {
				var err error
				if line, err = cr.AppendInsert(line[:0], row); err != nil {
					return err
				}
				return tab.AddPostgres(line[:len(line)-1])
			}); err != nil {
				return fmt.Errorf("read %s from postgres: %w", r.Target.Qualified(), err)
			}
		}
		err := sink.Query(ctx, "SELECT * FROM "+feldera.SQLIdent(t.Dest.CanonicalName()), func(row json.RawMessage) error {
			return tab.AddFeldera(row)
		})
		if err != nil {
			return fmt.Errorf("read %s from feldera: %w", t.Dest.Name, err)
		}
		return nil
	}
	if err := pass(); err != nil {
		return Result{}, err
	}
	if !tab.Match() {
		tab.StartDiff()
		if err := pass(); err != nil {
			return Result{}, err
		}
	}
	return tab.Result(maxDiffs), nil
}
