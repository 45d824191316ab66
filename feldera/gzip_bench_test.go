package feldera_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// benchBody is a 10,000-row batch shaped like the benchmark table's rows.
func benchBody() []byte {
	var b bytes.Buffer
	for i := 0; i < 10_000; i++ {
		fmt.Fprintf(&b, `{"insert":{"id":%d,"name":"name-%d","amount":"%d.%02d","ts":"2024-01-01T00:%02d:%02dZ","payload":{"k":%d,"v":"payload"}}}`+"\n",
			i, i, i/100, i%100, i/60%60, i%60, i)
	}
	return b.Bytes()
}

// Does gzip pay on loopback? BenchmarkIngressLoopback posts a 10,000-row
// batch to a server that reads and discards it; BenchmarkGzipBatch only
// compresses the same batch at the fastest level. If compressing alone
// takes longer than the whole uncompressed request, gzip cannot pay there.
//
//	go test ./feldera -run '^$' -bench 'IngressLoopback|GzipBatch'
func BenchmarkIngressLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"token":"t"}`)
	}))
	defer srv.Close()
	c, err := feldera.New(feldera.Config{URL: srv.URL, Pipeline: "p"})
	if err != nil {
		b.Fatal(err)
	}
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Ingress(context.Background(), "t", body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGzipBatch(b *testing.B) {
	body := benchBody()
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out.Reset()
		zw.Reset(&out)
		zw.Write(body)
		zw.Close()
	}
	b.ReportMetric(float64(len(body))/float64(out.Len()), "ratio")
}
