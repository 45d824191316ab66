// Command felderatest-serve serves the Feldera double (felderatest) on a
// loopback port, for tools and tests that talk to a Feldera by URL: the
// portable contract tests in feldera/ run against it as they would
// against a real pipeline (FELDERA_TEST_URL, FELDERA_TEST_PIPELINE). It
// prints the URL and serves until interrupted. It is a test tool: the
// pgfeldera binary does not link it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

func main() {
	program := flag.String("program", "feldera/testdata/contract.sql", "file with the pipeline's CREATE TABLE statements")
	pipeline := flag.String("pipeline", "p", "pipeline name")
	loaded := flag.Bool("loaded", true, "steps that take time, as a loaded pipeline's (felderatest.Loaded)")
	flag.Parse()
	ddl, err := os.ReadFile(*program)
	if err != nil {
		fmt.Fprintln(os.Stderr, "felderatest-serve:", err)
		os.Exit(2)
	}
	tables, err := felderatest.ParseDDL(string(ddl))
	if err != nil {
		fmt.Fprintf(os.Stderr, "felderatest-serve: %s: %v\n", *program, err)
		os.Exit(2)
	}
	cfg := felderatest.Config{Pipeline: *pipeline, Tables: tables}
	if *loaded {
		felderatest.Loaded(&cfg)
	}
	s, err := felderatest.NewServer(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "felderatest-serve:", err)
		os.Exit(1)
	}
	defer s.Close()
	fmt.Println(s.URL)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
}
