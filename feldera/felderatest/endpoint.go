package felderatest

import (
	"fmt"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/circuit"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// endpointFor finds or creates the endpoint of a path segment (as sent)
// and query: Feldera hashes the two into the endpoint's name, so `users`,
// `USERS` and `"users"` are three endpoints of one table.
func (s *Server) endpointFor(raw string, t *table.Table, key string) *circuit.Endpoint {
	k := raw + "?" + key
	ep, ok := s.endpoints[k]
	if !ok {
		s.nextEndpoint++
		ep = &circuit.Endpoint{ID: s.nextEndpoint, Table: t, Name: fmt.Sprintf("%s.api-ingress-%016x", raw, s.nextEndpoint)}
		s.endpoints[k] = ep
		s.endpointByID[ep.ID] = ep
	}
	return ep
}
