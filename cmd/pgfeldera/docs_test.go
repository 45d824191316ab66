package main

import (
	"os"
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
