package metrics_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/metrics"
)

const alertsDir = "../docs/examples/prometheus"

// ruleMetric is a metric name in a rule's expression or annotation; a
// histogram's series (_bucket, _sum, _count) count as their metric.
var ruleMetric = regexp.MustCompile(`pgfeldera_[a-z_]+`)

// Every metric the alert rules and the dashboard name is one the binary
// exports: a metric renamed in the code leaves no rule or panel silently
// watching nothing.
func TestAlertRules_NameExportedMetrics(t *testing.T) {
	for _, f := range []string{alertsDir + "/pgfeldera-alerts.yml", "../docs/examples/grafana/pgfeldera-dashboard.json"} {
		t.Run(filepath.Base(f), func(t *testing.T) { namesExported(t, f) })
	}
}

func namesExported(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(file, ".json") && !json.Valid(b) {
		t.Fatalf("%s is not valid JSON", file)
	}
	served := map[string]bool{}
	for _, n := range metrics.Exported(metrics.New("", "s", slog.New(slog.NewTextHandler(io.Discard, nil)))) {
		name, _, _ := strings.Cut(n, "{")
		served[name] = true
	}
	named := ruleMetric.FindAllString(string(b), -1)
	if len(named) == 0 || len(served) == 0 {
		t.Fatalf("named %d, served %d: one side was not read", len(named), len(served))
	}
	for _, n := range named {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(n, suffix); ok && served[s] {
				base = s
			}
		}
		if !served[base] {
			t.Errorf("%s names %s, which the binary does not export", file, n)
		}
	}
}

// The rules are valid, and each alert fires on the series made for it and
// clears on its healthy twin (pgfeldera-alerts.test.yml), by promtool.
// In CI a missing promtool fails; elsewhere it skips, saying how to get it.
func TestAlertRules_Promtool(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		promtool, _ = exec.LookPath("promtool")
	}
	if promtool == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found (CI): .ci/install-promtool.sh installs it")
		}
		t.Skip("promtool not found: .ci/install-promtool.sh installs it (Debian's prometheus package), or set PROMTOOL")
	}
	for _, args := range [][]string{{"check", "rules", "pgfeldera-alerts.yml"}, {"test", "rules", "pgfeldera-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = alertsDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
