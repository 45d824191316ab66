// Command pgfeldera streams PostgreSQL row changes into a Feldera pipeline
// and acknowledges WAL to PostgreSQL only after Feldera reports the changes
// complete.
//
// Subcommands: run, demo, check, status, verify, ddl, resnapshot, version. Exit codes: 0 graceful
// stop, 2 configuration error, 70 crash point, 1 any other fatal error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Exit codes: a contract with scripts and orchestrators.
const (
	exitOK     = 0
	exitFatal  = 1
	exitConfig = 2
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, stop, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	os.Exit(code)
}

const topUsage = `usage: pgfeldera <command> [flags]

commands:
  run         stream PostgreSQL changes into Feldera (see: pgfeldera run --help)
  demo        run against a throwaway local Postgres and the built-in Feldera double (runs pgfeldera-demo)
  check       check every prerequisite of run at once, each problem with its fix (--json)
  status      show the slot, the state file and the pipeline
  verify      compare each mapped table in Postgres and Feldera
  ddl         print Feldera CREATE TABLE statements for TABLES from the Postgres catalog
  resnapshot  ask the running connector to copy tables again while it streams (see: pgfeldera resnapshot --help)
  version     print the version

exit codes: 0 graceful stop, 2 configuration error, 70 crash point, 1 other fatal error
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, stop func(), args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitConfig
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "pgfeldera", version)
		return exitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	case "run":
		cfg, logger, code, done := configure("run", rest, getenv, stderr)
		if done {
			return code
		}
		if err := crashtest.Configure(cfg.CrashAt, cfg.CrashAfterBatches); err != nil {
			fmt.Fprintln(stderr, "pgfeldera:", err)
			return exitConfig
		}
		return runConnector(ctx, stop, cfg, logger)
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case "status":
		return runStatus(ctx, rest, getenv, stdout, stderr)
	case "verify":
		return runVerify(ctx, rest, getenv, stdout, stderr)
	case "check":
		return runCheck(ctx, rest, getenv, stdout, stderr)
	case "ddl":
		return runDDL(ctx, rest, getenv, stdout, stderr)
	case "resnapshot":
		return runResnapshot(ctx, rest, getenv, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "pgfeldera: unknown command %q\n\n%s", cmd, topUsage)
		return exitConfig
	}
}

// configResult maps a configuration outcome to an exit: --help is 0, a bad
// setting is 2.
func configResult(err error, stderr io.Writer) (int, bool) {
	if err == nil {
		return 0, false
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK, true
	}
	fmt.Fprintln(stderr, "pgfeldera: configuration error:", err)
	return exitConfig, true
}

// configure parses a subcommand's settings and builds its logger; done
// means exit with code (help, or a configuration error already reported).
func configure(cmd string, args []string, getenv func(string) string, stderr io.Writer) (cfg *Config, logger *slog.Logger, code int, done bool) {
	cfg, err := parseConfig(cmd, args, getenv, stderr)
	if code, done := configResult(err, stderr); done {
		return nil, nil, code, true
	}
	if logger, err = newLogger(cfg.LogLevel, cfg.LogFormat, stderr); err != nil {
		fmt.Fprintln(stderr, "pgfeldera:", err)
		return nil, nil, exitConfig, true
	}
	return cfg, logger, 0, false
}

// configureClient is configure and the Feldera client the settings name.
func configureClient(cmd string, args []string, getenv func(string) string, stderr io.Writer) (*Config, *slog.Logger, *feldera.Client, int, bool) {
	cfg, logger, code, done := configure(cmd, args, getenv, stderr)
	if done {
		return nil, nil, nil, code, true
	}
	client, err := cfg.felderaClient(logger)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera:", err)
		return nil, nil, nil, exitConfig, true
	}
	return cfg, logger, client, 0, false
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
