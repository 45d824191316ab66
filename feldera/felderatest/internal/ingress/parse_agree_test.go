package ingress

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// The fast paths of the double's parser answer exactly as encoding/json's
// path does, wherever they answer at all.

// FuzzParseBody: a body read line by line gives the commands, the errors
// and the event count the stream decoder gives.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{
		"{\"insert\":{\"id\":1,\"name\":\"a\",\"score\":2}}\n{\"delete\":{\"id\":1}}\n",
		"{\"insert\":{\"id\":1}} {\"insert\":{\"id\":2}}\n",
		"{\"insert\":{\"id\":1,\n\"name\":\"x\"}}\n",
		"\n\n{\"update\":{\"id\":3,\"score\":4}}\r\n",
		"{\"insert\":{\"ID\":1,\"Name\":\"x\"},\"delete\":{\"id\":2}}\n",
		"{\"insert\":{\"id\":\"1\"}}\n{\"upsert\":{\"id\":1}}\n[1]\n",
		"{\"insert\":{\"id\":1,\"id\":2}}\n{\"insert\":{\"id\":1}\n",
		"{\"insert\":{\"id\":1,\"name\":\"caf\\u00e9\",\"score\":null}}\n",
		"\f{\"insert\":{\"id\":1}}\n",
		"{\"insert\":{\"id\":1,\"junk\":" + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "}}\n",
	} {
		f.Add([]byte(s))
	}
	name := "name"
	rel := feldera.Relation{Name: "t", PrimaryKey: []string{"id"}, Fields: []feldera.Field{
		{Name: "id", ColumnType: feldera.ColumnType{Type: "BIGINT"}},
		{Name: "name", ColumnType: feldera.ColumnType{Type: "VARCHAR", Nullable: true}, Default: &name},
		{Name: "score", ColumnType: feldera.ColumnType{Type: "INTEGER", Nullable: true}},
	}}
	tb, err := table.New(rel)
	if err != nil {
		f.Fatal(err)
	}
	a := Args{formatIsJSON: true}
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, errs, n := ParseBody(tb, body, a, 0)
		wops, werrs, wn := parseStream(tb, body, a, 0)
		if n != wn || !reflect.DeepEqual(describeOps(ops), describeOps(wops)) || !reflect.DeepEqual(errs, werrs) {
			t.Fatalf("%q:\nline by line: %d events %v %v\nstream:       %d events %v %v", body, n, describeOps(ops), errs, wn, describeOps(wops), werrs)
		}
	})
}

func describeOps(ops []table.Op) []string {
	var out []string
	for _, o := range ops {
		row, _ := json.Marshal(o.Row)
		out = append(out, fmt.Sprintf("%c %s %v", o.Kind, row, o.Set))
	}
	return out
}
