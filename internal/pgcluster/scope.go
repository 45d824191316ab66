package pgcluster

import (
	"os"
	"strings"
	"sync"
	"testing"
)

// Every integration test declares whether its outcome can depend on the
// server's major version, before it reaches a cluster: EveryVersion (slot
// and failover behaviour, the replication protocol and keepalives, type
// output, catalog queries) or AnyVersion (what pgfeldera and Feldera do with
// the changes once decoded). CI runs the whole suite on one server and, on
// the others, only the tests that declared EveryVersion
// (PGFELDERA_TEST_SCOPE=version); a test that declares nothing fails when it
// asks for a cluster, so none is left out of the other servers unnoticed.
// A subtest of an EveryVersion test calls AnyVersion when it is a
// broken-on-purpose variant: it shows that the test's check can see a
// loss, which one server shows as well as four.

// ScopeEnv names the variable that restricts a run to EveryVersion tests.
const ScopeEnv = "PGFELDERA_TEST_SCOPE"

var declared sync.Map // top-level test name → true

// topName is the name of the top-level test tb belongs to.
func topName(tb testing.TB) string {
	name, _, _ := strings.Cut(tb.Name(), "/")
	return name
}

// EveryVersion declares that the test's outcome can depend on the server's
// major version: CI runs it on every server.
func EveryVersion(tb testing.TB) {
	tb.Helper()
	declared.Store(topName(tb), true)
}

// AnyVersion declares that the test's outcome does not depend on the
// server's major version: CI runs it on one server, and it skips itself
// when PGFELDERA_TEST_SCOPE=version.
func AnyVersion(tb testing.TB) {
	tb.Helper()
	declared.Store(topName(tb), true)
	if os.Getenv(ScopeEnv) == "version" {
		tb.Skipf("%s=version: this test does not depend on the server version and runs on one server only", ScopeEnv)
	}
}

// checkDeclared fails a test that reaches a cluster without declaring its
// scope. Benchmarks are not run in CI's version passes and need not.
func checkDeclared(tb testing.TB) {
	tb.Helper()
	if _, ok := tb.(*testing.T); !ok {
		return
	}
	if msg := undeclared(topName(tb)); msg != "" {
		tb.Fatal(msg)
	}
}

// undeclared is the guard's message for a top-level test that declared
// no scope, "" for one that did.
func undeclared(test string) string {
	if _, ok := declared.Load(test); ok {
		return ""
	}
	return test + " reaches a PostgreSQL cluster without declaring whether it depends on the server version: call pgcluster.EveryVersion(t) or pgcluster.AnyVersion(t) first"
}
