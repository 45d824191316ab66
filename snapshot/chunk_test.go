package snapshot_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// The window keeps exactly the chunk rows whose key the stream did not
// touch between the watermarks; touches outside a window are not kept.
func TestWindow(t *testing.T) {
	var w snapshot.Window
	w.Touch("k1") // before the low watermark: the chunk read after it is newer
	w.Open()
	w.Touch("k2")
	w.Touch("k2")
	w.Touch("k3")
	w.Close()
	w.Touch("k4") // after the high watermark: it follows the chunk's rows in the outbox
	for key, keep := range map[string]bool{"k1": true, "k2": false, "k3": false, "k4": true, "k5": true} {
		if w.Keep(key) != keep {
			t.Errorf("Keep(%s) = %v, want %v", key, !keep, keep)
		}
	}
	if w.Touched() != 2 {
		t.Errorf("Touched = %d", w.Touched())
	}
	w.Open()
	if !w.Keep("k2") || w.Touched() != 0 {
		t.Error("Open did not forget the previous window")
	}
}

func TestChunkSQL_Errors(t *testing.T) {
	s := snapshot.Source{Table: `"public"."t"`}
	key := []snapshot.KeyCol{{"id", "bigint"}}
	for name, err := range map[string]error{
		"no key":     func() error { _, err := s.ChunkSQL([]string{"id"}, nil, nil, 10); return err }(),
		"bad after":  func() error { _, err := s.ChunkSQL([]string{"id"}, key, []string{"1", "2"}, 10); return err }(),
		"zero limit": func() error { _, err := s.ChunkSQL([]string{"id"}, key, nil, 0); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), `"public"."t"`) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// Chunks of a table with a composite key (an integer and a text with
// quotes, backslashes and a mix of cases, whose collation order is not
// byte order) and a row filter, read one after another from the last key
// of the previous chunk: together exactly the filtered rows, each once.
func TestChunkSQL_PartitionsTheTable(t *testing.T) {
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE t (a int, b text, v int, PRIMARY KEY (a, b));
		INSERT INTO t SELECT g % 7, (ARRAY['x', 'O''Brien', 'back\slash', 'Zed', 'zed', 'é', ''])[1 + g % 7] || (g / 49), g
		FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	var want int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t WHERE v % 3 <> 0").Scan(&want); err != nil {
		t.Fatal(err)
	}
	s := snapshot.Source{Table: `"public"."t"`, Filter: "v % 3 <> 0"}
	key := []snapshot.KeyCol{{"a", "integer"}, {"b", "text"}}
	seen := map[string]bool{}
	var after []string
	chunks := 0
	for {
		sql, err := s.ChunkSQL([]string{"a", "b", "v"}, key, after, 37)
		if err != nil {
			t.Fatal(err)
		}
		var last []string
		rows := 0
		_, err = conn.PgConn().CopyTo(ctx, &lines{fn: func(line string) {
			f := strings.Split(line, "\t")
			if seen[f[0]+"\t"+f[1]] {
				t.Errorf("row %q in two chunks", line)
			}
			seen[f[0]+"\t"+f[1]] = true
			last = []string{f[0], unescapeCopy(f[1])}
			rows++
		}}, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if rows == 0 {
			break
		}
		chunks++
		after = last
	}
	if len(seen) != want || chunks < want/37 {
		t.Fatalf("%d rows in %d chunks, want %d", len(seen), chunks, want)
	}
}

// lines splits COPY output into lines.
type lines struct {
	fn      func(string)
	partial string
}

func (l *lines) Write(p []byte) (int, error) {
	all := l.partial + string(p)
	parts := strings.Split(all, "\n")
	for _, line := range parts[:len(parts)-1] {
		l.fn(line)
	}
	l.partial = parts[len(parts)-1]
	return len(p), nil
}

// unescapeCopy undoes COPY text format's backslash escapes (only \\ occurs here).
func unescapeCopy(s string) string { return strings.ReplaceAll(s, `\\`, `\`) }
