package oauth2_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/keygate/keygate/oauth2"
)

func ExampleConfig_Validate() {
	cfg := oauth2.DefaultConfig()
	cfg.Enabled = true
	cfg.Issuer = "https://issuer.example/"
	cfg.Algorithms = []string{"RS256", "HS256"}
	fmt.Println(cfg.Validate())
	// Output:
	// algorithms[1]: "HS256" is not allowed (use one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA)
}

func ExampleAuthenticator_Authenticate() {
	// An issuer with one ES256 key, serving its JWKS over TLS.
	raw, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	priv, _ := jwk.Import(raw)
	_ = priv.Set(jwk.KeyIDKey, "key-1")
	pub, _ := priv.PublicKey()
	set := jwk.NewSet()
	_ = set.AddKey(pub)
	issuer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(set)
	}))
	defer issuer.Close()

	cfg := oauth2.DefaultConfig()
	cfg.Enabled = true
	cfg.Issuer = "https://issuer.example/"
	cfg.JWKSURL = issuer.URL + "/.well-known/jwks.json"
	a, err := oauth2.New(context.Background(), cfg, oauth2.Deps{HTTPClient: issuer.Client()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()

	tok, _ := jwt.NewBuilder().
		Issuer("https://issuer.example/").
		Audience([]string{"keygate"}).
		Subject("svc-account").
		Expiration(time.Now().Add(time.Hour)).
		Claim("client_id", "reporting-app").
		Claim("scope", "registry").
		Claim("context", "7f1c2a9e-3b4d-4e5f-8a6b-1c2d3e4f5a6b").
		Build()
	signed, _ := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), priv))

	r := httptest.NewRequest(http.MethodGet, "https://keygate.example/registry", nil)
	r.Header.Set("Authorization", "Bearer "+string(signed))
	v, err := a.Authenticate(r)
	fmt.Println(v.OK, err)
	fmt.Println(v.Principal.ID, v.Principal.Products, v.Principal.Env, v.Principal.Context)

	r.Header.Set("Authorization", "Bearer not.a.token")
	v, _ = a.Authenticate(r)
	fmt.Println(v.OK, v.Message, v.Challenge)
	// Output:
	// true <nil>
	// oauth2:reporting-app [registry] live 7f1c2a9e-3b4d-4e5f-8a6b-1c2d3e4f5a6b
	// false invalid bearer token Bearer error="invalid_token"
}
