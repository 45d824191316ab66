package crashtest_test

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// matrixCases lists every case TestCrashMatrix runs, as "point/n/workload".
func matrixCases() []string {
	var out []string
	for _, wl := range workloads {
		for point, ns := range wl.points {
			for _, n := range ns {
				out = append(out, fmt.Sprintf("%s/%d/%s", point, n, wl.name))
			}
		}
	}
	sort.Strings(out)
	return out
}

// docs/crash-matrix.md's latest-run table lists exactly the cases the
// matrix runs: a case added or dropped in code must show in the docs.
func TestCrashMatrixDoc_MatchesCases(t *testing.T) {
	b, err := os.ReadFile("../docs/crash-matrix.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## Latest run")
	if !ok {
		t.Fatal("docs/crash-matrix.md has no \"## Latest run\" section")
	}
	var documented []string
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) < 5 || strings.TrimSpace(cells[0]) == "point" || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		documented = append(documented, fmt.Sprintf("%s/%s/%s", strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])))
		if lost := strings.TrimSpace(cells[4]); lost != "0" {
			t.Errorf("the documented run lost %s rows in %s", lost, line)
		}
	}
	sort.Strings(documented)
	want := matrixCases()
	if strings.Join(documented, "\n") != strings.Join(want, "\n") {
		t.Fatalf("docs/crash-matrix.md lists %d cases, the matrix runs %d:\ndocumented:\n%s\nrun:\n%s",
			len(documented), len(want), strings.Join(documented, "\n"), strings.Join(want, "\n"))
	}
}
