package fatal_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

func TestIs(t *testing.T) {
	plain := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", plain, false},
		{"wrapped plain", fmt.Errorf("post: %w", plain), false},
		{"marked", fatal.Wrap(plain), true},
		{"marked, wrapped", fmt.Errorf("session: %w", fatal.Wrap(plain)), true},
		{"decoder refusal", fmt.Errorf("decode: %w", &decode.RefusalError{Table: "public.t", Column: "c", OID: 9999}), true},
		{"pgoutput parse", &decode.ParseError{Msg: 'I', Reason: "short"}, true},
		{"catalog refusal", &catalog.RefusedError{Err: plain}, true},
		{"feldera parse errors", fmt.Errorf("push: %w", &feldera.APIError{Code: feldera.CodeParseErrors}), true},
		{"feldera other", &feldera.APIError{Code: "UnknownInputEndpoint"}, false},
		{"joined, one fatal", errors.Join(plain, fatal.Wrap(plain)), true},
		{"joined, none fatal", errors.Join(plain, plain), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fatal.Is(tc.err); got != tc.want {
				t.Fatalf("Is(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
