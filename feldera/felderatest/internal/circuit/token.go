package circuit

import (
	"encoding/base64"
	"encoding/json"
)

// TokenBody is a completion token's content: the incarnation that issued
// it, its endpoint, and the records the endpoint had queued then.
type TokenBody struct {
	U string `json:"u"`
	E uint64 `json:"e"`
	C uint64 `json:"c"`
}

// Token is ep's completion token now, issued by incarnation: URL-safe
// base64 without padding, or, padded (Config.PaddedTokens), standard
// base64 with padding.
func Token(incarnation string, ep *Endpoint, padded bool) string {
	b, _ := json.Marshal(TokenBody{U: incarnation, E: ep.ID, C: ep.Queued})
	if padded {
		// "~~~" and "???" put '+' and '/' in the standard encoding at any
		// alignment; a length that is not a multiple of 3 adds '='.
		b, _ = json.Marshal(struct {
			TokenBody
			P string `json:"p"`
		}{TokenBody{U: incarnation, E: ep.ID, C: ep.Queued}, "~~~???"})
		if len(b)%3 == 0 {
			b = append(b, ' ')
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseToken reads a completion token in either encoding.
func ParseToken(tok string) (TokenBody, error) {
	var tb TokenBody
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
