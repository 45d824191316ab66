package feldera_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// A pooled connection idle for IdleConnTimeout is closed by the client,
// so no request is written on one the server is about to close (the
// manager closes idle ones after 5 s): the next request dials anew. One
// right after the last reuses the connection.
func TestClient_ClosesIdleConnectionsBeforeTheServer(t *testing.T) {
	if feldera.DefaultIdleConnTimeout >= 5*time.Second {
		t.Fatalf("DefaultIdleConnTimeout %s is not below the manager's 5 s keep-alive", feldera.DefaultIdleConnTimeout)
	}
	var dials atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"name":"p"}`))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dials.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	c, err := feldera.New(feldera.Config{URL: s.URL, Pipeline: "p", IdleConnTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := c.Pipeline(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections for two requests in a row, want 1 (kept alive)", n)
	}
	time.Sleep(300 * time.Millisecond) // longer than IdleConnTimeout: the event, not a bound
	if _, err := c.Pipeline(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d connections after an idle spell, want 2 (the idle one closed by the client)", n)
	}
}
