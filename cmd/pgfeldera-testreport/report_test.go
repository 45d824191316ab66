package main

import (
	"strings"
	"testing"
)

const run = `make: go test
{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"a log line\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":2.5}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"run","Package":"p","Test":"TestB/sub"}
{"Action":"output","Package":"p","Test":"TestB/sub","Output":"it broke\n"}
{"Action":"fail","Package":"p","Test":"TestB/sub","Elapsed":1}
{"Action":"fail","Package":"p","Test":"TestB","Elapsed":1.5}
{"Action":"run","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Test":"TestC","Output":"=== RUN   TestC\n"}
{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:12: pgcluster: no PostgreSQL 17 here\n"}
{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestC","Elapsed":0}
{"Action":"fail","Package":"p","Elapsed":5}
{"Action":"start","Package":"q"}
{"Action":"run","Package":"q","Test":"TestHang"}
{"Action":"output","Package":"q","Output":"panic: test timed out\n"}
{"Action":"fail","Package":"q","Elapsed":9}
{"ImportPath":"r [r.test]","Action":"build-output","Output":"r.go:1: syntax error\n"}
{"ImportPath":"r [r.test]","Action":"build-fail"}
`

func TestReport(t *testing.T) {
	rep, err := read(strings.NewReader(run))
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, r := range rep.failed() {
		failed = append(failed, r.name())
	}
	if got, want := strings.Join(failed, " "), "p p.TestB p.TestB/sub q q.TestHang r [r.test].(build)"; got != want {
		t.Errorf("failed = %q, want %q", got, want)
	}
	cases := []struct {
		must []string
		want string
	}{
		{nil, ""},
		{[]string{"TestA"}, ""},
		{[]string{"TestC"}, "TestC"},         // skipped
		{[]string{"TestB/sub"}, "TestB/sub"}, // failed
		{[]string{"TestZ", "TestA"}, "TestZ"},
		{[]string{"TestHang"}, "TestHang"}, // never ended
	}
	for _, c := range cases {
		if got := strings.Join(rep.missing(c.must), " "); got != c.want {
			t.Errorf("missing(%v) = %q, want %q", c.must, got, c.want)
		}
	}
	slow := rep.slowest(2)
	if len(slow) != 2 || slow[0].Test != "TestA" || slow[1].Test != "TestB" {
		t.Errorf("slowest(2) = %v", slow)
	}
	var out strings.Builder
	if rep.write(&out, nil, 5) {
		t.Error("write reported a failed run green")
	}
	if !strings.Contains(out.String(), "it broke") || !strings.Contains(out.String(), "panic: test timed out") || !strings.Contains(out.String(), "syntax error") {
		t.Errorf("the failures' output is not in the report:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "skipped tests (1):\n  p.TestC: pgcluster: no PostgreSQL 17 here\n") {
		t.Errorf("the skipped test and its reason are not in the report:\n%s", out.String())
	}
	if strings.Contains(out.String(), "a log line") {
		t.Errorf("a passing test's output is in the report:\n%s", out.String())
	}
}

func TestReport_Green(t *testing.T) {
	rep, err := read(strings.NewReader(`{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1}
{"Action":"pass","Package":"p","Elapsed":1}
`))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if !rep.write(&out, []string{"TestA"}, 5) {
		t.Errorf("a green run reported failed:\n%s", out.String())
	}
	if rep.write(&out, []string{"TestA", "TestFailover"}, 5) {
		t.Error("a run without a test that must pass reported green")
	}
}
