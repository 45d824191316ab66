package pgcluster

import (
	"strings"
	"testing"
)

// The guard: a test that declared no scope is named in the failure; a
// declaration made by the test covers its subtests.
func TestScope_Guard(t *testing.T) {
	if msg := undeclared("TestNeverDeclared"); !strings.Contains(msg, "TestNeverDeclared") || !strings.Contains(msg, "pgcluster.EveryVersion") {
		t.Fatalf("undeclared test: %q", msg)
	}
	EveryVersion(t)
	if msg := undeclared(topName(t)); msg != "" {
		t.Fatalf("declared test: %q", msg)
	}
	t.Run("sub", func(t *testing.T) {
		if msg := undeclared(topName(t)); msg != "" {
			t.Fatalf("a subtest of a declared test: %q", msg)
		}
	})
}
