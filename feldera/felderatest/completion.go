package felderatest

import (
	"io"
	"net/http"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/circuit"
)

// ---- completion ----

func (s *Server) completionStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("token") {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(400)
		io.WriteString(w, "Query deserialize error: missing field `token`")
		return
	}
	tok, err := circuit.ParseToken(q.Get("token"))
	if err != nil {
		writeError(w, 400, "InvalidParam", "Invalid parameter: invalid completion token: "+err.Error(), map[string]any{"error": err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok.U != s.incarnation {
		writeError(w, http.StatusGone, feldera.CodePipelineRestarted,
			"The pipeline has been restarted since the completion token was generated", nil)
		return
	}
	ep, ok := s.endpointByID[tok.E]
	if !ok {
		writeError(w, http.StatusGone, "UnknownEndpointInCompletionToken", "The completion token refers to an unknown input endpoint", nil)
		return
	}
	s.c.Run(time.Now(), true) // a poll may begin a step (Config.StepsOnPoll)
	status := "inprogress"
	var step any
	if ep.Completed >= tok.C {
		status = "complete"
		step = ep.Step // conservative: the step of the endpoint's latest completed records
	} else {
		s.pending++
	}
	writeJSON(w, 200, map[string]any{"status": status, "step": step})
}
