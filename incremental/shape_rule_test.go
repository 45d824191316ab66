package incremental

import (
	"slices"
	"testing"
)

func TestReshaped(t *testing.T) {
	known := []string{"id 23/-1", "v 25/-1"}
	for _, tc := range []struct {
		name string
		now  []string
		want []string
	}{
		{"same", []string{"id 23/-1", "v 25/-1"}, nil},
		{"a column added", []string{"id 23/-1", "v 25/-1", "c 25/-1"}, []string{"c"}},
		{"a type changed", []string{"id 23/-1", "v 1043/24"}, []string{"v"}},
		{"a width changed", []string{"id 23/-1", "v 25/-1", "c 1043/14"}, []string{"c"}},
		{"a column no longer fed", []string{"id 23/-1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reshaped(known, tc.now); !slices.Equal(got, tc.want) {
				t.Fatalf("reshaped = %v, want %v", got, tc.want)
			}
		})
	}
}
