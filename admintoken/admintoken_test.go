package admintoken_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/audittest"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

func backends(t *testing.T) map[string][2]admintoken.Store {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	rs := redistest.Start(t)
	client := func() redis.UniversalClient {
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{rs.Addr}})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return map[string][2]admintoken.Store{
		"file":  {&keystore.FileAdmin{Path: path}, &keystore.FileAdmin{Path: path}},
		"redis": {&keystore.RedisAdmin{Client: client(), Prefix: "kg:"}, &keystore.RedisAdmin{Client: client(), Prefix: "kg:"}},
	}
}

// TestAuthenticate: on the file and the Redis keystore, a token created
// through one admin authenticates through another (a second replica) at
// once with its scopes; a revoked, expired, unknown, mistyped or
// malformed token is refused without an error; a revocation counts at
// once.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	for name, be := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Now()
			rec := &audittest.Recorder{}
			svc, err := admintoken.New(admintoken.Config{Store: be[0], Auditor: rec, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			later := now
			authn, err := admintoken.NewAuthenticator(admintoken.AuthConfig{Store: be[1], Now: func() time.Time { return later }})
			if err != nil {
				t.Fatal(err)
			}
			actor := keyops.Actor{ID: "cli:ops"}
			tok, tr, err := svc.Create(ctx, actor, admintoken.CreateRequest{Name: "ci", Scopes: []string{admintoken.KeysRead, admintoken.AuditRead}, ExpiresIn: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			short, _, err := svc.Create(ctx, actor, admintoken.CreateRequest{Name: "short", Scopes: []string{admintoken.KeysWrite}, ExpiresIn: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			info, ok, err := authn.Authenticate(ctx, tok)
			if err != nil || !ok || info.ID != tr.ID || info.Name != "ci" {
				t.Fatalf("Authenticate(new token) = %+v %v %v", info, ok, err)
			}
			if !info.Has(admintoken.KeysRead) || !info.Has(admintoken.AuditRead) || info.Has(admintoken.KeysWrite) {
				t.Errorf("scopes %v: Has is wrong", info.Scopes)
			}
			unknown, _ := keystore.GenerateAdminToken()
			typo := tok[:len(tok)-1] + map[bool]string{true: "b", false: "a"}[tok[len(tok)-1] == 'a']
			key, _ := keystore.Generate(keystore.Live)
			for what, bad := range map[string]string{"unknown": unknown, "typo": typo, "api key": key, "empty": "", "bearer": "Bearer " + tok} {
				if info, ok, err := authn.Authenticate(ctx, bad); ok || err != nil || info.ID != "" {
					t.Errorf("%s: Authenticate = %+v %v %v, want refused without error", what, info, ok, err)
				}
			}
			later = now.Add(2 * time.Minute) // short has expired
			if _, ok, _ := authn.Authenticate(ctx, short); ok {
				t.Error("an expired token authenticated")
			}
			if _, err := svc.Revoke(ctx, actor, tr.ID); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := authn.Authenticate(ctx, tok); ok || err != nil {
				t.Errorf("revoked token: ok=%v err=%v", ok, err)
			}
			if _, _, err := svc.Create(ctx, actor, admintoken.CreateRequest{Scopes: []string{"keys:delete"}}); !errors.Is(err, admintoken.ErrInvalid) {
				t.Errorf("unknown scope: %v, want ErrInvalid", err)
			}
			// Audited: create, create, revoke, refused create; never a token or a hash.
			var actions []string
			for _, e := range rec.Events() {
				actions = append(actions, e.Action+":"+e.Outcome())
				if e.Actor != actor {
					t.Errorf("event %s: actor %+v", e.Action, e.Actor)
				}
				for k, v := range e.Changes {
					if strings.Contains(v, "kga_") || strings.Contains(v, "sha256:") || strings.Contains(k, "hash") {
						t.Errorf("event %s leaks %s=%s", e.Action, k, v)
					}
				}
			}
			want := "admin_token.create:ok admin_token.create:ok admin_token.revoke:ok admin_token.create:error"
			if got := strings.Join(actions, " "); got != want {
				t.Errorf("audited %s, want %s", got, want)
			}
			// A name must be printable text: it is listed and audited.
			for _, name := range []string{"ci\n2026-11-24 forged row", "ci\x1b[2K", "ci\u202e"} {
				if _, _, err := svc.Create(ctx, actor, admintoken.CreateRequest{Name: name, Scopes: []string{admintoken.KeysRead}}); !errors.Is(err, admintoken.ErrInvalid) || !strings.Contains(err.Error(), "name: must not contain control") {
					t.Errorf("name %q: %v, want ErrInvalid naming the field", name, err)
				}
			}
		})
	}
}

func TestParseScopes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"keys:read,keys:write", "keys:read,keys:write", true},
		{" audit:read , audit:read ,usage:read", "audit:read,usage:read", true},
		{"consumers:read,consumers:write", "consumers:read,consumers:write", true},
		{"", "", false},
		{"admin", "", false},
		{"keys:read,keys:*", "", false},
	}
	for _, tt := range tests {
		got, err := admintoken.ParseScopes(tt.in)
		if (err == nil) != tt.ok || strings.Join(got, ",") != tt.want {
			t.Errorf("ParseScopes(%q) = %v, %v", tt.in, got, err)
		}
	}
}
