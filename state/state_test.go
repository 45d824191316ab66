package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/state"
)

func TestLoad_Absent(t *testing.T) {
	_, err := state.Load(filepath.Join(t.TempDir(), "nope.json"))
	if !errors.Is(err, state.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
}

func TestSaveLoad_RoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.json")
	in := &state.State{Slot: "s", Publication: "p", Tables: []state.Table{{Source: "public.a", Dest: "a", Status: state.Complete, Rows: 3}}}
	if err := state.Save(p, in); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", fi.Mode().Perm())
	}
	out, err := state.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if out.Version != state.Version || out.Slot != "s" || len(out.Tables) != 1 || out.Tables[0].Rows != 3 || !out.Complete() {
		t.Fatalf("loaded %+v", out)
	}
	if strings.Contains(readFile(t, p), "lsn") {
		t.Fatal("the state file must not record a stream position")
	}
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLoad_CorruptAndUnknownVersion(t *testing.T) {
	for name, content := range map[string]string{
		"corrupt":        `{"version":1,"slot":`,
		"unknownVersion": `{"version":99,"slot":"s","publication":"p","tables":[]}`,
		"unknownStatus":  `{"version":1,"slot":"s","publication":"p","tables":[{"source":"a","dest":"a","status":"half"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s.json")
			os.WriteFile(p, []byte(content), 0o600)
			_, err := state.Load(p)
			if err == nil || errors.Is(err, state.ErrNotExist) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v; want an error naming %s", err, p)
			}
			if readFile(t, p) != content {
				t.Fatal("Load changed the file")
			}
		})
	}
}

func TestSave_NoTempFilesLeft(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.json")
	for i := 0; i < 3; i++ {
		if err := state.Save(p, &state.State{Slot: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("dir has %d entries, want 1", len(ents))
	}
}

func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := state.Save(path, &state.State{Slot: "s"}); err != nil {
		t.Fatal(err)
	}
	stale := []string{".state.json8034271", ".state.json.fence12"}
	keep := []string{"state.json", ".state.json", ".state.jsonx1", "other.json", ".other.json55", ".state.json.fence"}
	for _, n := range append(stale, keep[1:]...) {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
	}
	removed, err := state.RemoveStale(path)
	if err != nil || len(removed) != len(stale) {
		t.Fatalf("removed %v, %v; want %v", removed, err, stale)
	}
	for _, n := range keep {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s was removed", n)
		}
	}
	if _, err := state.Load(path); err != nil {
		t.Fatal(err)
	}
}

// An incremental table's progress survives a round trip: the after-key
// (with a value holding a quote and a tab), chunks and rows.
func TestSaveLoad_Incremental(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.json")
	in := &state.State{Slot: "s", Publication: "p", Tables: []state.Table{
		{Source: "public.a", Dest: "a", Status: state.Incremental, After: []string{"42", "it's\ta"}, Chunks: 7, Copied: 70000},
		{Source: "public.b", Dest: "b", Status: state.Complete}}}
	if err := state.Save(p, in); err != nil {
		t.Fatal(err)
	}
	out, err := state.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a := out.Tables[0]
	if a.Status != state.Incremental || len(a.After) != 2 || a.After[1] != "it's\ta" || a.Chunks != 7 || a.Copied != 70000 {
		t.Fatalf("loaded %+v", a)
	}
	if out.Complete() || !out.Incremental() {
		t.Fatalf("Complete = %v, Incremental = %v: want false, true", out.Complete(), out.Incremental())
	}
	if strings.Contains(readFile(t, p), `"after"`) != true || strings.Count(readFile(t, p), `"after"`) != 1 {
		t.Fatal("only the incremental table records an after-key")
	}
}

// A resnapshot of every table replaces the state; the requests it carries
// over settle when their tables are read again, and one naming a table no
// longer streamed is refused, naming it.
func TestCarryRequests(t *testing.T) {
	old := &state.State{Requests: []state.Request{
		{ID: "done", Tables: []string{"public.a"}, Done: true},
		{ID: "open", Tables: []string{"public.a", "public.b"}},
		{ID: "gone", Tables: []string{"public.c"}},
		{ID: "refused", Tables: []string{"public.a"}, Refused: "earlier"},
	}}
	s := &state.State{Tables: []state.Table{{Source: "public.a", Status: state.Incremental}, {Source: "public.b", Status: state.Incremental}}}
	s.CarryRequests(old)
	s.CarryRequests(nil)
	if len(s.Requests) != 4 {
		t.Fatalf("requests = %+v", s.Requests)
	}
	if r := s.Request("gone"); r == nil || !strings.Contains(r.Refused, "public.c is no longer one of them") {
		t.Fatalf("gone = %+v", r)
	}
	if r := s.Request("refused"); r.Refused != "earlier" {
		t.Fatalf("refused = %+v", r)
	}
	s.SettleRequests()
	if r := s.Request("open"); r.Done {
		t.Fatal("a request settled before its tables were read again")
	}
	for i := range s.Tables {
		s.Tables[i].Status = state.Complete
	}
	s.SettleRequests()
	if r := s.Request("open"); !r.Done {
		t.Fatal("a carried request did not settle once its tables were read again")
	}
	old.Requests[1].Tables[0] = "changed"
	if s.Request("open").Tables[0] != "public.a" {
		t.Fatal("the carried request shares its tables with the old state")
	}
}
