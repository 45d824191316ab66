package setup

import (
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// identityProblem: which source replica identities keep a Feldera table
// exact, by whether it has a key.
func TestIdentityProblem(t *testing.T) {
	keyed := feldera.Relation{Name: "users", PrimaryKey: []string{"id"}}
	keyless := feldera.Relation{Name: "log", Materialized: true}
	unmaterialized := feldera.Relation{Name: "log"}
	withKey := []catalog.Column{{Name: "id", InKey: true}, {Name: "v"}}
	noKey := []catalog.Column{{Name: "id"}, {Name: "v"}}
	for _, c := range []struct {
		name       string
		rel        feldera.Relation
		ident      byte
		cols       []catalog.Column
		requireKey bool
		want       string // "" for none
	}{
		{"keyed, DEFAULT with a primary key", keyed, 'd', withKey, true, ""},
		{"keyed, USING INDEX", keyed, 'i', withKey, true, ""},
		{"keyed, FULL", keyed, 'f', noKey, true, ""},
		{"keyed, DEFAULT without a key", keyed, 'd', noKey, true, "REPLICA IDENTITY DEFAULT and no usable key"},
		{"keyed, NOTHING", keyed, 'n', withKey, true, "REPLICA IDENTITY NOTHING and no usable key"},
		{"keyless, key required", keyless, 'f', noKey, true, "has no PRIMARY KEY: replays after a crash would duplicate rows"},
		{"keyless accepted, FULL", keyless, 'f', noKey, false, ""},
		{"keyless accepted, DEFAULT", keyless, 'd', withKey, false, "REPLICA IDENTITY DEFAULT, which does not send the old row"},
		{"keyless accepted, NOTHING", keyless, 'n', noKey, false, "REPLICA IDENTITY NOTHING, which does not send the old row"},
		{"keyless accepted, not materialized", unmaterialized, 'f', noKey, false, "is not materialized: its rows could not be read back"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := identityProblem(catalog.Table{Schema: "public", Name: "t"}, c.rel, catalog.Source{Ident: c.ident, Cols: c.cols}, c.requireKey)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err = %v, want %q", err, c.want)
			case err != nil && !fatal.Is(err):
				t.Fatalf("not fatal: %v", err)
			}
		})
	}
}
