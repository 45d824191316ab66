package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADME_ConfigTable keeps the README's configuration table in step
// with the settings the binary parses.
func TestREADME_ConfigTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `") {
			cells := strings.Split(line, "|")
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
		}
	}
	// And the other way: every variable the table documents is one the
	// binary reads (a renamed or removed setting leaves no stale row).
	known := map[string]bool{}
	for _, s := range settings {
		known[s.Env] = true
	}
	for name := range rows {
		if name != "" && name == strings.ToUpper(name) && strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789") == "" && !known[name] {
			t.Errorf("README documents %s, which pgfeldera does not read", name)
		}
	}
	for _, s := range settings {
		def, ok := rows[s.Env]
		if !ok {
			t.Errorf("README lacks %s", s.Env)
			continue
		}
		want := s.Default
		if want == "" {
			want = "—"
		}
		if def != want {
			t.Errorf("README says %s defaults to %q, the code says %q", s.Env, def, want)
		}
	}
}

// TestExamples_UseKnownVariables keeps the deployment examples in step with
// the settings: a renamed variable must not leave a manifest silently
// configuring nothing.
func TestExamples_UseKnownVariables(t *testing.T) {
	known := map[string]bool{}
	for _, s := range settings {
		known[s.Env] = true
	}
	isVar := func(s string) bool {
		return s != "" && strings.ToUpper(s) == s && strings.ContainsAny(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && !strings.ContainsAny(s, " ./:-\"")
	}
	check := func(file string, names []string) {
		if len(names) == 0 {
			t.Errorf("%s: found no variables: the parser below no longer matches the file", file)
		}
		for _, n := range names {
			if !known[n] {
				t.Errorf("%s sets %s, which pgfeldera does not read", file, n)
			}
		}
	}
	env, err := os.ReadFile("../../docs/examples/pgfeldera.env")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(env), "\n") {
		if name, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			names = append(names, name)
		}
	}
	check("pgfeldera.env", names)

	unit, err := os.ReadFile("../../docs/examples/pgfeldera.service")
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, line := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			name, _, _ := strings.Cut(v, "=")
			names = append(names, name)
		}
	}
	check("pgfeldera.service", names)

	k8s, err := os.ReadFile("../../docs/examples/kubernetes-sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	inSecret := false
	for _, line := range strings.Split(string(k8s), "\n") {
		trim := strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(trim, "- name: "); ok && isVar(v) {
			names = append(names, v)
		}
		if trim == "stringData:" {
			inSecret = true
			continue
		}
		if inSecret {
			k, _, ok := strings.Cut(trim, ":")
			if !ok || !strings.HasPrefix(line, "  ") {
				inSecret = false
				continue
			}
			names = append(names, k)
		}
	}
	check("kubernetes-sidecar.yaml", names)
}

// TestArchitecture_ListsEveryPackage keeps docs/architecture.md's table
// in step with the tree: every package has a row, and every row names a
// package that exists.
func TestArchitecture_ListsEveryPackage(t *testing.T) {
	b, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `") {
			rows[strings.Trim(strings.TrimSpace(strings.Split(line, "|")[1]), "`")] = true
		}
	}
	pkgs := map[string]bool{}
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, _ := filepath.Rel("../..", filepath.Dir(path))
			pkgs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages; the walk is wrong", len(pkgs))
	}
	for p := range pkgs {
		if !rows[p] {
			t.Errorf("docs/architecture.md has no row for package %s", p)
		}
	}
	for r := range rows {
		if !pkgs[r] {
			t.Errorf("docs/architecture.md lists %s, which is no package", r)
		}
	}
}
