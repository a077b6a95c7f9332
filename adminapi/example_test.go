package adminapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// oneToken is a TokenAuthenticator that knows one token.
type oneToken struct{}

func (oneToken) Authenticate(_ context.Context, token string) (adminapi.Principal, bool, error) {
	if token != "kga_example" {
		return adminapi.Principal{}, false, nil
	}
	return adminapi.Principal{ID: "tok_example", Scopes: []string{adminapi.ScopeConsumersWrite}}, true, nil
}

// The admin API over keyops on a keystore file, with a token store: a
// request without a credential is a 401 problem; a token with the scope
// creates a consumer.
func Example() {
	dir, _ := os.MkdirTemp("", "adminapi-example")
	defer os.RemoveAll(dir)
	limits, _ := ratelimit.DefaultConfig().Resolver()
	ops, _ := keyops.New(keyops.Config{Store: &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}, Limits: limits})

	cfg := adminapi.DefaultConfig()
	cfg.Enabled, cfg.TLS = true, adminapi.TLSOff
	api, err := adminapi.New(cfg, adminapi.Deps{Ops: ops, Tokens: oneToken{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	resp, _ := http.Get(srv.URL + "/v1/consumers")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	fmt.Print(string(b))

	req, _ := http.NewRequest("POST", srv.URL+"/v1/consumers", strings.NewReader(`{"name":"Acme Corp"}`))
	req.Header.Set("Authorization", "Bearer kga_example")
	req.Header.Set("Content-Type", "application/json")
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.HasPrefix(resp.Header.Get("Location"), "/v1/consumers/con_"))
	// Output:
	// 401 application/problem+json
	// {"type":"urn:keygate:problem:unauthorized","title":"authentication required","status":401,"detail":"send an admin token (Authorization: Bearer kga_...) or a client certificate","instance":"/v1/consumers"}
	// 201 true
}
