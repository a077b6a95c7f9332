package keystore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keystore"
)

func TestAdminTokenFormat(t *testing.T) {
	t.Parallel()
	tok, err := keystore.GenerateAdminToken()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "kga_") || len(tok) != keystore.AdminTokenLen {
		t.Fatalf("token %q: want kga_ and %d characters", tok, keystore.AdminTokenLen)
	}
	if err := keystore.ParseAdminToken(tok); err != nil {
		t.Fatalf("ParseAdminToken(new token) = %v", err)
	}
	typo := []byte(tok)
	if typo[10] == 'a' { // still base62, checksum now wrong
		typo[10] = 'b'
	} else {
		typo[10] = 'a'
	}
	key, _ := keystore.Generate(keystore.Live)
	tests := []struct {
		name, tok string
		want      error
	}{
		{"typo", string(typo), keystore.ErrChecksum},
		{"api key", key, keystore.ErrMalformed},
		{"short", tok[:20], keystore.ErrMalformed},
		{"bad char", tok[:10] + "-" + tok[11:], keystore.ErrMalformed},
		{"empty", "", keystore.ErrMalformed},
	}
	for _, tt := range tests {
		err := keystore.ParseAdminToken(tt.tok)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: ParseAdminToken = %v, want %v", tt.name, err, tt.want)
		}
		if err != nil && tt.tok != "" && strings.Contains(err.Error(), tt.tok) {
			t.Errorf("%s: the error contains the token", tt.name)
		}
	}
	// An API key is not an admin token and the reverse.
	if _, err := keystore.Parse(tok); err == nil {
		t.Error("keystore.Parse accepted an admin token")
	}
}

type adminTokenStore interface {
	CreateAdminToken(ctx context.Context, t keystore.AdminToken) error
	ListAdminTokens(ctx context.Context) ([]keystore.AdminToken, error)
	RevokeAdminToken(ctx context.Context, id string) (keystore.AdminToken, error)
	LookupAdminToken(ctx context.Context, h keystore.Hash) (keystore.AdminToken, bool, error)
}

// TestAdminTokenStores: create, look up by hash, list and revoke admin
// tokens in the file and the Redis keystore; a second admin (another
// replica) sees each change at once.
func TestAdminTokenStores(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	rs := redistest.Start(t)
	backends := []struct {
		name   string
		a, b   adminTokenStore
		keysOK func(t *testing.T)
	}{
		{"file", &keystore.FileAdmin{Path: path}, &keystore.FileAdmin{Path: path}, func(t *testing.T) {
			// A gateway's FileStore still loads the file.
			s, err := keystore.OpenFile(keystore.FileConfig{Path: path})
			if err != nil {
				t.Fatalf("OpenFile of a keystore with admin tokens: %v", err)
			}
			_ = s.Close()
		}},
		{"redis", &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}, &keystore.RedisAdmin{Client: redisClient(t, rs.Addr)}, func(*testing.T) {}},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			if k, ok := be.a.(interface {
				Issue(context.Context, keystore.IssueRequest) (string, keystore.Record, error)
			}); ok {
				if _, _, err := k.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test}); err != nil {
					t.Fatal(err)
				}
			}
			tok, rec, err := keystore.NewAdminToken("ci", []string{"keys:read"}, time.Hour, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := be.a.CreateAdminToken(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if err := be.a.CreateAdminToken(ctx, rec); err == nil {
				t.Error("a second create with the same id and hash was accepted")
			}
			got, ok, err := be.b.LookupAdminToken(ctx, keystore.HashKey(tok))
			if err != nil || !ok || got.ID != rec.ID || got.StateAt(time.Now()) != keystore.Active {
				t.Fatalf("lookup on the other admin: %+v %v %v", got, ok, err)
			}
			other, _ := keystore.GenerateAdminToken()
			if _, ok, err := be.b.LookupAdminToken(ctx, keystore.HashKey(other)); ok || err != nil {
				t.Errorf("unknown token: found=%v err=%v", ok, err)
			}
			list, err := be.b.ListAdminTokens(ctx)
			if err != nil || len(list) != 1 || list[0].ID != rec.ID || list[0].Scopes[0] != "keys:read" {
				t.Fatalf("list: %+v %v", list, err)
			}
			if _, err := be.a.RevokeAdminToken(ctx, rec.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := be.a.RevokeAdminToken(ctx, rec.ID); !errors.Is(err, keystore.ErrAdminTokenRevoked) {
				t.Errorf("second revoke: %v", err)
			}
			if _, err := be.a.RevokeAdminToken(ctx, "tok_0000000000000000"); !errors.Is(err, keystore.ErrAdminTokenNotFound) {
				t.Errorf("revoke of an unknown id: %v", err)
			}
			got, ok, err = be.b.LookupAdminToken(ctx, keystore.HashKey(tok))
			if err != nil || !ok || got.StateAt(time.Now()) != keystore.Revoked {
				t.Fatalf("after revoke, on the other admin: %+v %v %v", got, ok, err)
			}
			be.keysOK(t)
		})
	}
}

// FuzzParseAdminToken: no input panics, a refusal never echoes the
// input, and whatever is accepted is shaped like a token.
func FuzzParseAdminToken(f *testing.F) {
	tok, _ := keystore.GenerateAdminToken()
	for _, s := range []string{tok, "", "kga_", "kga_" + strings.Repeat("0", 36), "svc_live_x", tok[:39] + "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := keystore.ParseAdminToken(s)
		if err == nil && (len(s) != keystore.AdminTokenLen || !strings.HasPrefix(s, keystore.AdminTokenPrefix)) {
			t.Fatalf("accepted %q", s)
		}
		if err != nil && len(s) > 8 && strings.Contains(err.Error(), s) {
			t.Fatalf("error %q echoes the input", err)
		}
	})
}
