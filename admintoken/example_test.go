package admintoken_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// The admin API authenticates a bearer token, then checks a scope: !ok
// is 401, a missing scope 403, an error 5xx.
func ExampleAuthenticator() {
	dir, _ := os.MkdirTemp("", "admintoken-example")
	defer os.RemoveAll(dir)
	store := &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}
	svc, _ := admintoken.New(admintoken.Config{Store: store})
	token, _, _ := svc.Create(context.Background(), keyops.Actor{ID: "cli:alice"},
		admintoken.CreateRequest{Name: "dashboard", Scopes: []string{admintoken.KeysRead, admintoken.UsageRead}})

	authn, _ := admintoken.NewAuthenticator(admintoken.AuthConfig{Store: store})
	info, ok, err := authn.Authenticate(context.Background(), token)
	fmt.Println(ok, err, info.Name, info.Has(admintoken.KeysRead), info.Has(admintoken.KeysWrite))
	_, ok, err = authn.Authenticate(context.Background(), "kga_made-up")
	fmt.Println(ok, err)
	// Output:
	// true <nil> dashboard true false
	// false <nil>
}
