package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events name the package here
	Test       string
	Elapsed    float64
	Output     string
}

// result is what became of one test (or, with Test empty, one package).
type result struct {
	Package, Test string
	Action        string // pass, fail or skip; run while it never ended
	Elapsed       time.Duration
	output        strings.Builder
}

func (r *result) name() string {
	if r.Test == "" {
		return r.Package
	}
	return r.Package + "." + r.Test
}

// report is every test and package of one or more `go test -json` runs.
type report struct {
	results map[string]*result
	order   []*result
}

func read(in io.Reader) (*report, error) {
	rep := &report{results: map[string]*result{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' {
			continue // make's own lines
		}
		var ev event
		if err := json.Unmarshal(b, &ev); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		rep.add(ev)
	}
	return rep, sc.Err()
}

func (rep *report) add(ev event) {
	switch ev.Action {
	case "build-output":
		ev = event{Action: "output", Package: ev.ImportPath, Test: "(build)", Output: ev.Output}
	case "build-fail":
		ev = event{Action: "fail", Package: ev.ImportPath, Test: "(build)"}
	}
	key := ev.Package + "\x00" + ev.Test
	r := rep.results[key]
	if r == nil {
		r = &result{Package: ev.Package, Test: ev.Test, Action: "run"}
		rep.results[key] = r
		rep.order = append(rep.order, r)
	}
	switch ev.Action {
	case "output":
		r.output.WriteString(ev.Output)
	case "pass", "fail", "skip":
		r.Action = ev.Action
		r.Elapsed = time.Duration(ev.Elapsed * float64(time.Second))
	}
}

// failed lists the tests and packages that failed or never finished
// (a panic or a timeout ends a package with its tests still running).
func (rep *report) failed() []*result {
	var out []*result
	for _, r := range rep.order {
		if r.Action == "fail" || r.Action == "run" {
			out = append(out, r)
		}
	}
	return out
}

// missing lists the names in must that did not pass: a test that was
// skipped, failed or never ran. A name matches a test by its full name
// ("TestX" or "TestX/sub"), in any package.
func (rep *report) missing(must []string) []string {
	var out []string
	for _, name := range must {
		passed := false
		for _, r := range rep.order {
			if r.Test == name && r.Action == "pass" {
				passed = true
			}
		}
		if !passed {
			out = append(out, name)
		}
	}
	return out
}

// skipped lists the tests that were skipped, each with the reason its
// output gives (the line of its t.Skip, without the file prefix).
func (rep *report) skipped() []string {
	var out []string
	for _, r := range rep.order {
		if r.Test == "" || r.Action != "skip" {
			continue
		}
		why := ""
		for _, line := range strings.Split(r.output.String(), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
				continue
			}
			if i := strings.Index(line, ": "); i > 0 && strings.Contains(line[:i], ".go:") {
				line = line[i+2:]
			}
			why = line
			break
		}
		out = append(out, r.name()+": "+why)
	}
	return out
}

// slowest returns the n longest top-level tests.
func (rep *report) slowest(n int) []*result {
	var tops []*result
	for _, r := range rep.order {
		if r.Test != "" && !strings.Contains(r.Test, "/") && r.Action != "run" {
			tops = append(tops, r)
		}
	}
	sort.SliceStable(tops, func(i, j int) bool { return tops[i].Elapsed > tops[j].Elapsed })
	if len(tops) > n {
		tops = tops[:n]
	}
	return tops
}

// packages returns every package's result, in the order they started.
func (rep *report) packages() []*result {
	var out []*result
	for _, r := range rep.order {
		if r.Test == "" {
			out = append(out, r)
		}
	}
	return out
}

// write prints the failures with their output, the skipped tests with
// why, the packages' times and the slowest tests, and reports whether the
// run is green.
func (rep *report) write(w io.Writer, must []string, top int) bool {
	ok := true
	for _, r := range rep.failed() {
		ok = false
		fmt.Fprintf(w, "=== %s: %s\n%s\n", strings.ToUpper(r.Action), r.name(), r.output.String())
	}
	for _, name := range rep.missing(must) {
		ok = false
		fmt.Fprintf(w, "=== NOT PASSED: %s must pass in this run and did not (skipped, failed or never ran)\n", name)
	}
	if skips := rep.skipped(); len(skips) > 0 {
		fmt.Fprintf(w, "skipped tests (%d):\n", len(skips))
		for _, s := range skips {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	fmt.Fprintf(w, "packages:\n")
	for _, r := range rep.packages() {
		fmt.Fprintf(w, "  %-5s %8.1fs  %s\n", r.Action, r.Elapsed.Seconds(), r.Package)
	}
	fmt.Fprintf(w, "slowest tests:\n")
	for _, r := range rep.slowest(top) {
		fmt.Fprintf(w, "  %-5s %8.1fs  %s\n", r.Action, r.Elapsed.Seconds(), r.name())
	}
	return ok
}
