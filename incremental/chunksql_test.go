package incremental

import (
	"strings"
	"testing"
)

// TestChunkSQL pins the order of a chunk's one query: the watermarks are
// committed before the chunk's transaction begins (its snapshot is taken
// after its low watermark), and in block ranges the table is locked
// before its relfilenode is read and before the rows' COPY, so no rewrite
// commits between the read and the scan.
func TestChunkSQL(t *testing.T) {
	marks := []Watermark{{Slot: "s", Run: "r", Chunk: 1, W: "high"}, {Slot: "s", Run: "r", Chunk: 3, W: "low"}}
	rows := `COPY (SELECT "id" FROM "public"."t" WHERE ctid >= '(0,0)'::tid AND ctid < '(8,0)'::tid) TO STDOUT`
	for _, tc := range []struct {
		blocks bool
		order  []string
	}{
		{true, []string{`"chunk":1`, `"chunk":3`, "COMMIT;", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;",
			`LOCK TABLE "public"."t" IN ACCESS SHARE MODE;`, "pg_current_snapshot()", `pg_relation_filenode('"public"."t"'::regclass)`, rows, ";COMMIT"}},
		{false, []string{`"chunk":1`, `"chunk":3`, "COMMIT;", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;", "pg_current_snapshot()", rows, ";COMMIT"}},
	} {
		q := chunkSQL(marks, `"public"."t"`, tc.blocks, rows)
		at := 0
		for _, part := range tc.order {
			i := strings.Index(q[at:], part)
			if i < 0 {
				t.Fatalf("blocks=%v: %q not found after offset %d in\n%s", tc.blocks, part, at, q)
			}
			at += i + len(part)
		}
		if !strings.HasSuffix(q, ";COMMIT") {
			t.Errorf("blocks=%v: the query does not end with the chunk's COMMIT:\n%s", tc.blocks, q)
		}
		if !tc.blocks && strings.Contains(q, "LOCK TABLE") {
			t.Errorf("key ranges lock the table:\n%s", q)
		}
	}
	if q := chunkSQL(nil, `"public"."t"`, false, rows); strings.HasPrefix(q, "COMMIT") {
		t.Errorf("no watermarks, yet a COMMIT first:\n%s", q)
	}
}
