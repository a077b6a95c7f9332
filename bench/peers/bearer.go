package main

// Targets keygate-bearer (and keygate-base-bearer with -keygate-base):
// keygate with its token endpoint on (auth.token_endpoint), loaded with a
// bearer token of the bench key in place of the key itself, as a client
// that has moved to OAuth 2.0 sends it: one token, used until it nears
// its expiry. Beside keygate with the key in the same run, it shows what
// the bearer path costs over the key's.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// bearerSuffix names the targets loaded with a bearer token.
const bearerSuffix = "-bearer"

func isBearer(name string) bool { return strings.HasSuffix(name, bearerSuffix) }

// bearerIssuer is the bearer targets' auth.token_endpoint.issuer: the
// tokens' iss, an https URL as keygate requires (nothing fetches it).
const bearerIssuer = "https://keygate.bench"

// bearerConfig turns the token endpoint on in a bearer target's config;
// tokens live an hour (its longest), and the bench fetches a new one
// after half of that.
func bearerConfig(name, cfg string) string {
	if !isBearer(name) {
		return cfg
	}
	return cfg + fmt.Sprintf("auth:\n  token_endpoint: { enabled: true, issuer: %q, ttl: 1h }\n", bearerIssuer)
}

// bearerToken is a target's token and when it was fetched.
type bearerToken struct {
	mu  sync.Mutex
	raw string
	at  time.Time
}

// credential is the header that authenticates a bench request to t: the
// bearer token of a bearer target, else the key (the i-th of the keys of
// a many-keys target).
func (b *bench) credential(ctx context.Context, t *target, i int) (name, value string, err error) {
	if !isBearer(t.name) {
		return "X-Api-Key", b.keyAt(t, i), nil
	}
	t.token.mu.Lock()
	defer t.token.mu.Unlock()
	if t.token.raw == "" || time.Since(t.token.at) > 30*time.Minute {
		raw, err := b.fetchToken(ctx, t)
		if err != nil {
			return "", "", err
		}
		t.token.raw, t.token.at = raw, time.Now()
	}
	return "Authorization", "Bearer " + t.token.raw, nil
}

// fetchToken exchanges the bench key for a token at t's token endpoint
// (client_credentials, the key id and the key as HTTP Basic).
func (b *bench) fetchToken(ctx context.Context, t *target) (string, error) {
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"extraction:sync"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.scheme()+t.addr+"/oauth2/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(b.keyID), url.QueryEscape(b.key))
	resp, err := b.client().Do(req)
	if err != nil {
		return "", fmt.Errorf("%s: token endpoint: %w", t.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &tok) != nil || tok.AccessToken == "" {
		return "", fmt.Errorf("%s: token endpoint answered %d: %s", t.name, resp.StatusCode, body)
	}
	return tok.AccessToken, nil
}
