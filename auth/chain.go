package auth

import (
	"errors"
	"net/http"
)

// Credential is one way to authenticate: it can tell whether a request carries
// its kind of credential, and check it.
type Credential interface {
	Present(r *http.Request) bool
	Authenticate(r *http.Request) (Verdict, error)
}

// Option is one authenticator in a Chain and the products it may grant.
type Option struct {
	// Method names the method.
	Method Method
	// Credential checks the method's credentials.
	Credential Credential
	// Products limits what the method may grant; a principal's products
	// are cut down to these. Empty means every product.
	Products []string
}

// Chain authenticates a request with exactly one of several methods: the
// one whose credential the request carries. A request that carries two
// (an API key and a bearer token, say) is refused as ambiguous. A Chain is
// immutable after NewChain and safe for concurrent use.
type Chain struct {
	options []Option
	missing Verdict
}

// NewChain builds a chain; order decides which method's message a request
// with no credential at all gets.
func NewChain(opts ...Option) (*Chain, error) {
	if len(opts) == 0 {
		return nil, errors.New("auth: no authentication method enabled")
	}
	c := &Chain{options: opts}
	c.missing = Refuse(ReasonMissing, msgMissing)
	for _, o := range opts {
		if o.Method == MethodOAuth2 {
			c.missing.Challenge = `Bearer realm="keygate"`
			if len(opts) > 1 {
				c.missing.Message = "Unauthorized: credentials missing; send an API key in x-api-key or an OAuth 2.0 bearer token"
			} else {
				c.missing.Message = "Unauthorized: bearer token missing"
			}
		}
	}
	return c, nil
}

// Authenticate picks the method whose credential is present and runs it.
func (c *Chain) Authenticate(r *http.Request) (Verdict, error) {
	var chosen *Option
	for i := range c.options {
		if c.options[i].Credential.Present(r) {
			if chosen != nil {
				return Refuse(ReasonAmbiguous, "Unauthorized: send either an API key or a bearer token, not both"), nil
			}
			chosen = &c.options[i]
		}
	}
	if chosen == nil {
		if r.Header.Get("Authorization") != "" || len(r.Header[headerAPIKey]) > 0 {
			// A credential of a method that is switched off.
			return Refuse(ReasonDisabled, "Unauthorized: this authentication method is not accepted"), nil
		}
		return c.missing, nil
	}
	v, err := chosen.Credential.Authenticate(r)
	if err != nil || !v.OK || len(chosen.Products) == 0 {
		return v, err
	}
	v.Principal.Products = intersect(v.Principal.Products, chosen.Products)
	return v, nil
}

func intersect(have, allowed []string) []string {
	for _, h := range have {
		ok := false
		for _, a := range allowed {
			ok = ok || a == h
		}
		if !ok { // only allocate when something is cut
			out := make([]string, 0, len(have))
			for _, h := range have {
				for _, a := range allowed {
					if a == h {
						out = append(out, h)
					}
				}
			}
			return out
		}
	}
	return have
}
