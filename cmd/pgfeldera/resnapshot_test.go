package main

import (
	"slices"
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
