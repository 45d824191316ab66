// Command pgfeldera-testreport reads `go test -json` on stdin and prints
// what CI needs to see: every failed test with its output, every skipped
// test with its reason, each package's time, the slowest tests, and the
// tests that had to pass in this run and
// did not (-must, e.g. the failover tests on PostgreSQL 17 and 18). It
// exits 1 unless the run is green.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	must := flag.String("must", "", "comma-separated test names that must pass in this run")
	top := flag.Int("top", 25, "how many of the slowest tests to list")
	flag.Parse()
	rep, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgfeldera-testreport:", err)
		os.Exit(1)
	}
	var names []string
	for _, n := range strings.Split(*must, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if !rep.write(os.Stdout, names, *top) {
		os.Exit(1)
	}
}
