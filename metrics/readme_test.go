package metrics_test

import (
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/metrics"
)

// readmeMetric is a metric as the README's "Operating it" section names it.
var readmeMetric = regexp.MustCompile("`(pgfeldera_[a-z_]+(\\{[a-z_,]+\\})?)`")

// The README's metric list and what the binary serves name the same
// metrics with the same labels, both ways: a metric the README promises
// and the binary lacks breaks a user's dashboard, and one the binary has
// and the README omits is undocumented.
func TestREADME_MetricList(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## Operating it")
	end := strings.Index(text, "Postgres side:")
	if start < 0 || end < start {
		t.Fatal(`README: no "## Operating it" section followed by "Postgres side:": the parser no longer matches the file`)
	}
	documented := map[string]bool{}
	for _, g := range readmeMetric.FindAllStringSubmatch(text[start:end], -1) {
		documented[g[1]] = true
	}
	served := map[string]bool{}
	for _, n := range metrics.Exported(metrics.New("", "s", slog.New(slog.NewTextHandler(io.Discard, nil)))) {
		served[n] = true
	}
	if len(served) == 0 || len(documented) == 0 {
		t.Fatalf("served %d, documented %d: one side was not read", len(served), len(documented))
	}
	var missing, extra []string
	for n := range served {
		if !documented[n] {
			missing = append(missing, n)
		}
	}
	for n := range documented {
		if !served[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("the binary serves metrics the README does not list: %s", strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		t.Errorf("the README lists metrics the binary does not serve: %s", strings.Join(extra, ", "))
	}
}
