package catalog

import (
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// A leaf partition's replica identity against what its root's Feldera
// table needs.
func TestLeafRefusal(t *testing.T) {
	keyed := &decode.Rel{Target: &decode.Target{Schema: "public", Name: "m", Dest: feldera.Relation{Name: "m", PrimaryKey: []string{"id", "day"}}},
		Cols: []decode.ColPlan{{Name: "id"}, {Name: "day"}, {Name: "v"}}, KeyCols: []int{0, 1}}
	keyless := &decode.Rel{Target: &decode.Target{Schema: "public", Name: "m", Dest: feldera.Relation{Name: "m"}},
		Cols: []decode.ColPlan{{Name: "id"}, {Name: "v"}}}
	for _, c := range []struct {
		name string
		rel  *decode.Rel
		leaf LeafIdentity
		want string
	}{
		{"keyed, FULL", keyed, LeafIdentity{"m_1", 'f', nil}, ""},
		{"keyed, primary key over the key", keyed, LeafIdentity{"m_1", 'd', []string{"id", "day"}}, ""},
		{"keyed, index over more", keyed, LeafIdentity{"m_1", 'i', []string{"day", "id", "v"}}, ""},
		{"keyed, primary key short of it", keyed, LeafIdentity{"m_1", 'd', []string{"id"}}, "does not carry day"},
		{"keyed, NOTHING", keyed, LeafIdentity{"m_1", 'n', nil}, "does not carry id, day"},
		{"keyless, FULL", keyless, LeafIdentity{"m_1", 'f', nil}, ""},
		{"keyless, DEFAULT", keyless, LeafIdentity{"m_1", 'd', []string{"id"}}, "is not REPLICA IDENTITY FULL"},
	} {
		got := LeafRefusal(c.rel, c.leaf)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
