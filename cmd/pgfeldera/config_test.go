package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func base() map[string]string {
	return map[string]string{
		"PG_DSN":           "postgres://app:s3cretPW@127.0.0.1:1/db",
		"TABLES":           "users,public.items:catalog_items",
		"FELDERA_URL":      "http://127.0.0.1:1",
		"FELDERA_PIPELINE": "p",
		"FELDERA_API_KEY":  "apikey:TOPSECRETKEY",
	}
}

func runWith(t *testing.T, vars map[string]string, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), func() {}, append([]string{"run"}, args...), env(vars), &out, &errb)
	return code, out.String() + errb.String()
}

func TestConfig_Defaults(t *testing.T) {
	c, err := parseConfig("run", nil, env(base()), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Publication != "pgfeldera" || c.Slot != "pgfeldera" || c.AckMode != "completed" || !c.RequirePrimaryKey ||
		c.BatchMaxRows != 10000 || c.BatchLinger.Milliseconds() != 50 || c.SnapshotMode != "initial" ||
		c.StateFile != "pgfeldera.state.json" || c.NoProgressTimeout.Minutes() != 5 || c.CompletionTimeout.Seconds() != 60 ||
		c.HTTPAddr != ":9187" || c.LogLevel != "info" || c.LogFormat != "text" || c.CrashAfterBatches != 1 ||
		c.IngressFence.Seconds() != 35 || c.RequestTimeout.Seconds() != 30 || c.StopTimeout.Seconds() != 20 {
		t.Fatalf("defaults: %+v", c)
	}
	if len(c.Tables) != 2 || c.Tables[0].Dest != "users" || c.Tables[1].Schema != "public" || c.Tables[1].Name != "items" || c.Tables[1].Dest != "catalog_items" {
		t.Fatalf("tables: %+v", c.Tables)
	}
}

func TestConfig_FlagWinsOverEnv(t *testing.T) {
	c, err := parseConfig("run", []string{"-batch-max-rows", "7"}, env(map[string]string{
		"PG_DSN": "postgres://x@h/db", "PG_TABLE": "t", "FELDERA_URL": "http://h", "FELDERA_PIPELINE": "p", "BATCH_MAX_ROWS": "9",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchMaxRows != 7 || len(c.Tables) != 1 || c.Tables[0].Dest != "t" {
		t.Fatalf("%+v", c)
	}
}

func TestConfig_BatchMaxBytes(t *testing.T) {
	for v, want := range map[string]int{"": 4 << 20, "4194304": 4 << 20, "64KiB": 64 << 10, "16MiB": 16 << 20, "1GiB": 1 << 30} {
		vars := map[string]string{"PG_DSN": "postgres://x@h/db", "PG_TABLE": "t", "FELDERA_URL": "http://h", "FELDERA_PIPELINE": "p"}
		if v != "" {
			vars["BATCH_MAX_BYTES"] = v
		}
		c, err := parseConfig("run", nil, env(vars), &bytes.Buffer{})
		if err != nil || c.BatchMaxBytes != want {
			t.Fatalf("BATCH_MAX_BYTES=%q: %d, %v; want %d", v, c.BatchMaxBytes, err, want)
		}
	}
}

func TestConfig_CheckpointWAL(t *testing.T) {
	for v, want := range map[string]int64{"": 0, "off": -1, "64KiB": 64 << 10, "256MiB": 256 << 20, "20GiB": 20 << 30} {
		vars := map[string]string{"PG_DSN": "postgres://x@h/db", "PG_TABLE": "t", "FELDERA_URL": "http://h", "FELDERA_PIPELINE": "p"}
		if v != "" {
			vars["FELDERA_CHECKPOINT_WAL"] = v
		}
		c, err := parseConfig("run", nil, env(vars), &bytes.Buffer{})
		if err != nil || c.CheckpointWAL != want {
			t.Fatalf("FELDERA_CHECKPOINT_WAL=%q: %d, %v; want %d", v, c.CheckpointWAL, err, want)
		}
	}
}

func TestConfig_BadValuesExit2(t *testing.T) {
	cases := []struct {
		name, key, value, want string
	}{
		{"batch", "BATCH_MAX_ROWS", "abc", "BATCH_MAX_ROWS"},
		{"batchZero", "BATCH_MAX_ROWS", "0", "BATCH_MAX_ROWS"},
		{"bytesUnit", "BATCH_MAX_BYTES", "16MB", "BATCH_MAX_BYTES"},
		{"bytesTiny", "BATCH_MAX_BYTES", "10", "BATCH_MAX_BYTES"},
		{"bytesHuge", "BATCH_MAX_BYTES", "2GiB", "BATCH_MAX_BYTES"},
		{"checkpointWALTiny", "FELDERA_CHECKPOINT_WAL", "1KiB", "FELDERA_CHECKPOINT_WAL"},
		{"checkpointWALWord", "FELDERA_CHECKPOINT_WAL", "on", "FELDERA_CHECKPOINT_WAL"},
		{"ackMode", "FELDERA_ACK_MODE", "maybe", "FELDERA_ACK_MODE"},
		{"linger", "BATCH_LINGER_MS", "-1", "BATCH_LINGER_MS"},
		{"snapshot", "SNAPSHOT_MODE", "sometimes", "SNAPSHOT_MODE"},
		{"timeout", "FELDERA_COMPLETION_TIMEOUT", "soon", "FELDERA_COMPLETION_TIMEOUT"},
		{"noProgress", "NO_PROGRESS_TIMEOUT", "0s", "NO_PROGRESS_TIMEOUT"},
		{"pk", "FELDERA_REQUIRE_PRIMARY_KEY", "perhaps", "FELDERA_REQUIRE_PRIMARY_KEY"},
		{"crash", "CRASH_AT", "after_lunch", "CRASH_AT"},
		{"crashN", "CRASH_AFTER_BATCHES", "0", "CRASH_AFTER_BATCHES"},
		{"slot", "PG_SLOT", "Bad-Slot", "PG_SLOT"},
		{"dupSource", "TABLES", "users,USERS", "TABLES"},
		{"url", "FELDERA_URL", "ftp://h", "FELDERA_URL"},
		{"logLevel", "LOG_LEVEL", "loud", "LOG_LEVEL"},
		{"logFormat", "LOG_FORMAT", "xml", "LOG_FORMAT"},
		{"requestTimeout", "FELDERA_REQUEST_TIMEOUT", "never", "FELDERA_REQUEST_TIMEOUT"},
		{"stopTimeout", "STOP_TIMEOUT", "-3s", "STOP_TIMEOUT"},
		{"dsn", "PG_DSN", "postgres://app:s3cretPW@127.0.0.1:notaport/db", "PG_DSN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vars := base()
			vars[tc.key] = tc.value
			code, out := runWith(t, vars)
			if code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("output does not name %s:\n%s", tc.want, out)
			}
			if tc.key != "PG_DSN" && !strings.Contains(out, tc.value) {
				t.Fatalf("output does not show the value %q:\n%s", tc.value, out)
			}
			for _, secret := range []string{"TOPSECRETKEY", "s3cretPW"} {
				if strings.Contains(out, secret) {
					t.Fatalf("output leaks a secret:\n%s", out)
				}
			}
		})
	}
}

// A fence that could lift while pgfeldera still waits for the request it
// guards is refused, naming both variables; a longer one is accepted.
func TestConfig_FenceMustOutlastRequestTimeout(t *testing.T) {
	for _, c := range []struct {
		fence, timeout string
		ok             bool
	}{{"30s", "30s", false}, {"10s", "30s", false}, {"35s", "35s", false}, {"", "40s", false}, {"6s", "5s", true}, {"", "", true}} {
		vars := base()
		vars["FELDERA_INGRESS_FENCE"], vars["FELDERA_REQUEST_TIMEOUT"] = c.fence, c.timeout
		_, err := parseConfig("run", nil, env(vars), &bytes.Buffer{})
		if c.ok {
			if err != nil {
				t.Errorf("fence %q, request timeout %q: %v", c.fence, c.timeout, err)
			}
			continue
		}
		code, out := runWith(t, vars)
		if code != 2 || !strings.Contains(out, "FELDERA_INGRESS_FENCE") || !strings.Contains(out, "FELDERA_REQUEST_TIMEOUT") {
			t.Errorf("fence %q, request timeout %q: exit %d\n%s", c.fence, c.timeout, code, out)
		}
	}
}

func TestConfig_TablesAndShorthandBoth(t *testing.T) {
	vars := base()
	vars["PG_TABLE"] = "users"
	code, out := runWith(t, vars)
	if code != 2 || !strings.Contains(out, "TABLES") || !strings.Contains(out, "PG_TABLE") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestConfig_Missing(t *testing.T) {
	code, out := runWith(t, map[string]string{})
	if code != 2 || !strings.Contains(out, "PG_DSN") || !strings.Contains(out, "FELDERA_URL") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestConfig_HelpListsEveryVariable(t *testing.T) {
	code, out := runWith(t, nil, "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, s := range settings {
		if !strings.Contains(out, s.Env) || !strings.Contains(out, "-"+s.Flag()) {
			t.Errorf("--help lacks %s", s.Env)
		}
		if s.Default != "" && !strings.Contains(out, s.Default) {
			t.Errorf("--help lacks the default of %s", s.Env)
		}
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"host=h user=u password=pw dbname=d":        "host=h user=u password=xxxxx dbname=d",
		"host=h password='p w' dbname=d":            "host=h password=xxxxx dbname=d",
		"postgres://u@h/db?password=pw":             "postgres://u@h/db?password=xxxxx",
		// The client key's passphrase is a secret too, in every form.
		"postgres://u@h/db?sslpassword=kpw&sslmode=verify-full": "postgres://u@h/db?sslmode=verify-full&sslpassword=xxxxx",
		"postgres://u:pw@h/db?sslpassword=kpw":                  "postgres://u:xxxxx@h/db?sslpassword=xxxxx",
		"postgres://u@h/db?pass%77ord=pw":                       "postgres://u@h/db?password=xxxxx",
		"postgresql://u@h/db?SSLPASSWORD=kpw":                   "postgresql://u@h/db?SSLPASSWORD=xxxxx",
		"host=h sslpassword=kpw sslkey=/k.key dbname=d":         "host=h sslpassword=xxxxx sslkey=/k.key dbname=d",
		"host=h sslpassword='k pw' password=pw":                 "host=h sslpassword=xxxxx password=xxxxx",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVersionAndUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), func() {}, []string{"version"}, env(nil), &out, &errb); code != 0 || !strings.Contains(out.String(), "pgfeldera") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run(context.Background(), func() {}, []string{"frobnicate"}, env(nil), &out, &errb); code != 2 {
		t.Fatalf("unknown command: %d", code)
	}
}

// Every subcommand that connects fails on unreachable servers without
// printing a secret.
func TestSecretsNeverPrinted_OnConnectionFailure(t *testing.T) {
	dsns := []string{
		base()["PG_DSN"],
		"postgres://app:s3cretPW@127.0.0.1:1/db?sslpassword=K3YPASS&sslmode=disable",
		"host=127.0.0.1 port=1 dbname=db user=app password=s3cretPW sslpassword='K3YPASS' sslmode=disable",
		"host=127.0.0.1 port=1 dbname=db user=app password=s3cretPW sslpassword=K3YPASS sslmode=bogus", // invalid: the parse error
	}
	for _, dsn := range dsns {
		for _, cmd := range [][]string{{"verify"}, {"verify", "--json"}, {"status"}, {"status", "--json"}} {
			var out, errb bytes.Buffer
			vars := base()
			vars["PG_DSN"] = dsn
			vars["STATE_FILE"] = t.TempDir() + "/state.json"
			code := run(context.Background(), func() {}, cmd, env(vars), &out, &errb)
			all := out.String() + errb.String()
			if code == exitOK || all == "" {
				t.Errorf("%v: exit %d, output %q: want a failure with a reason", cmd, code, all)
			}
			for _, secret := range []string{"TOPSECRETKEY", "s3cretPW", "K3YPASS"} {
				if strings.Contains(all, secret) {
					t.Errorf("%v with PG_DSN %s… printed a secret: %s", cmd, dsn[:20], all)
				}
			}
		}
	}
}

// HTTP_ADDR=off turns the metrics server off; an empty value is the
// default (an empty variable cannot be told from an unset one).
func TestConfig_HTTPAddrOff(t *testing.T) {
	for _, tc := range []struct{ value, want string }{{"off", ""}, {"", ":9187"}, {"127.0.0.1:0", "127.0.0.1:0"}} {
		vars := base()
		vars["HTTP_ADDR"] = tc.value
		c, err := parseConfig("run", nil, env(vars), &bytes.Buffer{})
		if err != nil || c.HTTPAddr != tc.want {
			t.Errorf("HTTP_ADDR=%q: address %q, %v; want %q", tc.value, c.HTTPAddr, err, tc.want)
		}
	}
}
