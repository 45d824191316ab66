package metrics

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/pgfeldera/pgfeldera/connector"
)

// StageTimes is one stage of pgfeldera_stage_seconds as a running
// process serves it: how many source transactions reached the stage, their
// mean time from commit, and upper bounds of the median and the 99th
// percentile (the histogram buckets they fall in; +Inf past the last).
type StageTimes struct {
	Stage string  `json:"stage"`
	Count uint64  `json:"transactions"`
	Mean  float64 `json:"mean_seconds"`
	P50   float64 `json:"p50_at_most_seconds"`
	P99   float64 `json:"p99_at_most_seconds"`
}

// ReadStages scrapes url (a running pgfeldera's /metrics) for the stage
// histograms, in stage order (connector.Stages).
func ReadStages(ctx context.Context, url string) ([]StageTimes, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseStages(resp.Body)
}

// parseStages reads the stage histograms from the text exposition format.
func parseStages(r io.Reader) ([]StageTimes, error) {
	type hist struct {
		les, counts []float64
		sum, count  float64
	}
	hs := map[string]*hist{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		const prefix = "pgfeldera_stage_seconds_"
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		name, rest, _ := strings.Cut(line[len(prefix):], "{")
		labels, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("pgfeldera_stage_seconds: %q: %w", line, err)
		}
		stage, le := label(labels, "stage"), label(labels, "le")
		h := hs[stage]
		if h == nil {
			h = &hist{}
			hs[stage] = h
		}
		switch name {
		case "bucket":
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil {
				return nil, fmt.Errorf("pgfeldera_stage_seconds: le %q: %w", le, err)
			}
			h.les, h.counts = append(h.les, bound), append(h.counts, v)
		case "sum":
			h.sum = v
		case "count":
			h.count = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []StageTimes
	for _, stage := range connector.Stages() {
		h := hs[stage]
		if h == nil {
			continue
		}
		st := StageTimes{Stage: stage, Count: uint64(h.count)}
		if h.count > 0 {
			st.Mean = h.sum / h.count
			st.P50, st.P99 = upperBound(h.les, h.counts, 0.5*h.count), upperBound(h.les, h.counts, 0.99*h.count)
		}
		out = append(out, st)
	}
	return out, nil
}

// upperBound is the first bucket bound whose cumulative count reaches n.
func upperBound(les, counts []float64, n float64) float64 {
	for i, c := range counts {
		if c >= n {
			return les[i]
		}
	}
	return math.Inf(1)
}

// label is the value of name in a label set (`a="x",b="y"`).
func label(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
