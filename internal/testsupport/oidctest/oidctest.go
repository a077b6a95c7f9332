// Package oidctest starts a real OpenID Connect provider on loopback for
// tests: the in-memory provider of github.com/zitadel/oidc (an
// OpenID-certified library), with its HTML username/password login page,
// over HTTPS with a fresh certificate. Nothing is faked: discovery, the
// authorization endpoint, PKCE, the token endpoint and the JWKS are the
// library's own.
package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// User is a user who can sign in at the provider's login page.
type User struct {
	// Subject is the ID token's sub.
	Subject  string
	Username string
	Password string
	// Email is the email claim of the ID token.
	Email string
	Name  string
}

// The login page's form, for a browser to fill in.
const (
	LoginUsernameSelector = `#username`
	LoginPasswordSelector = `#password`
	LoginSubmitSelector   = `button[type=submit]`
)

// Provider is a running OpenID provider.
type Provider struct {
	// Issuer is https://127.0.0.1:PORT.
	Issuer string
	// ClientID and ClientSecret are a confidential web client allowed the
	// authorization code flow (PKCE S256 supported), registered with the
	// redirect URIs given to Start.
	ClientID, ClientSecret string
	// Users can sign in; each ID token carries sub, email, name.
	Users []User
	// Cert is the provider's TLS certificate.
	Cert *x509.Certificate

	srv *httptest.Server
}

// Start runs a provider with two users ("alice", "bob") and one client
// for redirectURIs, until the test ends.
func Start(t testing.TB, redirectURIs ...string) *Provider {
	t.Helper()
	p := &Provider{
		ClientID:     "keygate-portal-" + random(4),
		ClientSecret: random(16),
		Users: []User{
			{Subject: "user-alice", Username: "alice", Password: "alice-" + random(4), Email: "alice@acme.example", Name: "Alice Adams"},
			{Subject: "user-bob", Username: "bob", Password: "bob-" + random(4), Email: "bob@nowhere.example", Name: "Bob Brown"},
		},
	}
	users := userStore{}
	for _, u := range p.Users {
		users[u.Subject] = &storage.User{ID: u.Subject, Username: u.Username, Password: u.Password, FirstName: u.Name,
			Email: u.Email, EmailVerified: true, PreferredLanguage: language.English}
	}
	client := storage.WebClient(p.ClientID, p.ClientSecret, redirectURIs...)
	st := &claimsInIDToken{Storage: storage.NewStorageWithClients(users, map[string]*storage.Client{p.ClientID: client})}

	p.srv = httptest.NewUnstartedServer(nil)
	p.srv.StartTLS()
	t.Cleanup(p.srv.Close)
	p.Issuer = p.srv.URL
	p.Cert = p.srv.Certificate()
	p.srv.Config.Handler = exampleop.SetupServer(p.Issuer, st, nil, false)
	return p
}

// HTTPClient trusts the provider's certificate.
func (p *Provider) HTTPClient() *http.Client { return p.srv.Client() }

// CertPool holds the provider's certificate.
func (p *Provider) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.Cert)
	return pool
}

// claimsInIDToken has the provider put the user's claims (email, name) in
// the ID token itself, as most providers do, rather than only behind the
// userinfo endpoint.
type claimsInIDToken struct{ *storage.Storage }

func (s *claimsInIDToken) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return assertingClient{c}, nil
}

type assertingClient struct{ op.Client }

func (assertingClient) IDTokenUserinfoClaimsAssertion() bool { return true }

// userStore is the provider's users by subject.
type userStore map[string]*storage.User

func (u userStore) GetUserByID(id string) *storage.User { return u[id] }

func (u userStore) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}

func (u userStore) ExampleClientID() string { return storage.ServiceUserID }

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
