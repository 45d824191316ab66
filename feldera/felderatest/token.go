package felderatest

import (
	"encoding/base64"
	"encoding/json"
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

type tokenBody struct {
	U string `json:"u"`
	E uint64 `json:"e"`
	C uint64 `json:"c"`
}

func (s *Server) token(ep *circuit.Endpoint) string {
	b, _ := json.Marshal(tokenBody{U: s.incarnation, E: ep.ID, C: ep.Queued})
	if s.cfg.PaddedTokens {
		// "~~~" and "???" put '+' and '/' in the standard encoding at any
		// alignment; a length that is not a multiple of 3 adds '='.
		b, _ = json.Marshal(struct {
			tokenBody
			P string `json:"p"`
		}{tokenBody{U: s.incarnation, E: ep.ID, C: ep.Queued}, "~~~???"})
		if len(b)%3 == 0 {
			b = append(b, ' ')
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseToken(tok string) (tokenBody, error) {
	var tb tokenBody
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		raw, err = base64.StdEncoding.DecodeString(tok)
	}
	if err != nil {
		return tb, err
	}
	err = json.Unmarshal(raw, &tb)
	return tb, err
}
