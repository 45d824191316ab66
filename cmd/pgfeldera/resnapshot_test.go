package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/state"
)

func TestResnapshotArgs(t *testing.T) {
	wait, timeout, tables, rest, err := resnapshotArgs([]string{"--wait", "users", "--pg-slot", "s1", "--timeout", "5m", "public.items", "--log-level=debug"})
	if err != nil || !wait || timeout != 5*time.Minute || !slices.Equal(tables, []string{"users", "public.items"}) ||
		!slices.Equal(rest, []string{"--pg-slot", "s1", "--log-level=debug"}) {
		t.Fatalf("%v %v %v %v %v", wait, timeout, tables, rest, err)
	}
	if wait, _, _, _, err := resnapshotArgs([]string{"--wait=false", "users"}); err != nil || wait {
		t.Fatalf("--wait=false: %v %v", wait, err)
	}
	for _, bad := range [][]string{{"--timeout", "x"}, {"--timeout"}, {"--wait=maybe"}, {"--timeout=-1s"}} {
		if _, _, _, _, err := resnapshotArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestResolveTables(t *testing.T) {
	st := &state.State{Tables: []state.Table{{Source: "public.users", Dest: "users"}, {Source: "public.items_a", Dest: "items"}, {Source: "public.items_b", Dest: "items"}}}
	for _, c := range []struct {
		in   []string
		want []string
	}{
		{[]string{"users"}, []string{"public.users"}},
		{[]string{"public.users", "users"}, []string{"public.users"}},
		{[]string{"items"}, []string{"public.items_a", "public.items_b"}},
		{[]string{"ITEMS"}, []string{"public.items_a", "public.items_b"}},
	} {
		if got, err := resolveTables(st, c.in); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := resolveTables(st, []string{"nosuch"}); err == nil {
		t.Error("an unknown table accepted")
	}
}

// resnapshot --wait exits 0 once the connector marks the request done,
// and 1 when it refused it or the timeout passed first, saying why.
func TestWaitRequest_ExitCodes(t *testing.T) {
	for _, c := range []struct {
		name     string
		req      *state.Request // nil: never taken
		timeout  time.Duration
		code     int
		stdout   string
		stderrIn string
	}{
		{"done", &state.Request{ID: "r1", Tables: []string{"public.users"}, Done: true}, 0, exitOK, "done after", ""},
		{"refused", &state.Request{ID: "r1", Tables: []string{"public.users"}, Refused: "table public.users has no primary key"}, 0, exitFatal, "", "refused request r1: table public.users has no primary key"},
		{"timeout", nil, 300 * time.Millisecond, exitFatal, "", "not done after 300ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := t.TempDir() + "/state.json"
			st := &state.State{Version: state.Version, Slot: "s", Publication: "p"}
			if c.req != nil {
				st.Requests = []state.Request{*c.req}
			}
			if err := state.Save(path, st); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			code := waitRequest(context.Background(), path, "s", "r1", c.timeout, &stdout, &stderr)
			if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderrIn) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, c.code, stdout.String(), stderr.String())
			}
		})
	}
}
