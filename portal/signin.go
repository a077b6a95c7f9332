package portal

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/keygate/keygate/internal/strictjson"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// oidcClient is the identity provider, once discovered.
type oidcClient struct {
	verifier *oidc.IDTokenVerifier
	conf     oauth2.Config
}

// signInTTL bounds an OIDC sign-in from the redirect to the callback.
const signInTTL = 10 * time.Minute

// provider discovers the identity provider on first use and keeps it; a
// failed discovery is tried again on the next sign-in, so the portal
// starts even while the provider is away.
func (p *Portal) provider(ctx context.Context) (*oidcClient, error) {
	p.oidcMu.Lock()
	defer p.oidcMu.Unlock()
	if p.oidc != nil {
		return p.oidc, nil
	}
	o := p.cfg.OIDC
	ctx = oidc.ClientContext(ctx, p.client)
	prov, err := oidc.NewProvider(ctx, o.Issuer)
	if err != nil {
		return nil, err
	}
	scopes := []string{oidc.ScopeOpenID}
	for _, s := range o.Scopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	redirect := o.RedirectURL
	if redirect == "" {
		redirect = p.cfg.publicURL() + "/callback"
	}
	var secret string
	if o.ClientSecretEnv != "" {
		secret = p.getenv(o.ClientSecretEnv)
	}
	p.oidc = &oidcClient{
		verifier: prov.Verifier(&oidc.Config{ClientID: o.ClientID, Now: p.now}),
		conf:     oauth2.Config{ClientID: o.ClientID, ClientSecret: secret, Endpoint: prov.Endpoint(), RedirectURL: redirect, Scopes: scopes},
	}
	return p.oidc, nil
}

// home is the sign-in page, or the keys for a signed-in user.
func (p *Portal) home(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		if _, ok, _ := p.sessions.get(r.Context(), c.Value); ok {
			http.Redirect(w, r, "/keys", http.StatusSeeOther)
			return
		}
	}
	name := p.cfg.OIDC.Name
	if name == "" {
		name = "your identity provider"
	}
	p.render(w, r, http.StatusOK, "signin", nil, map[string]any{
		"OIDC": p.cfg.OIDC.Issuer != "", "OIDCName": name, "Demo": p.demo != "",
	})
}

// oidcStart sends the browser to the identity provider: authorization
// code with PKCE, a state bound to this browser by a cookie, and a nonce.
func (p *Portal) oidcStart(w http.ResponseWriter, r *http.Request) {
	if p.cfg.OIDC.Issuer == "" {
		p.errorPage(w, r, nil, http.StatusNotFound, "Page not found", "Sign-in through an identity provider is not configured.")
		return
	}
	oc, err := p.provider(r.Context())
	if err != nil {
		p.log.Warn("portal: identity provider discovery failed", zap.Error(err))
		p.errorPage(w, r, nil, http.StatusBadGateway, "Sign-in unavailable", "The identity provider cannot be reached. Try again shortly.")
		return
	}
	v := onceValue{Verifier: oauth2.GenerateVerifier(), Nonce: newSecret()}
	state, err := putOnce(r.Context(), p.kv, "oidc", v, p.now(), signInTTL)
	if err != nil {
		p.log.Error("portal: session store", zap.Error(err))
		p.errorPage(w, r, nil, http.StatusServiceUnavailable, "Temporarily unavailable", "Try again shortly.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: state, Path: "/", Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: int(signInTTL / time.Second)})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, oc.conf.AuthCodeURL(state, oidc.Nonce(v.Nonce), oauth2.S256ChallengeOption(v.Verifier)), http.StatusFound)
}

// oidcCallback ends an OIDC sign-in: the state must be this browser's,
// the code is exchanged with the PKCE verifier, and the ID token is
// verified (issuer, audience, expiry, signature, nonce) by go-oidc. The
// consumer comes from the configured claim.
func (p *Portal) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if p.cfg.OIDC.Issuer == "" {
		p.errorPage(w, r, nil, http.StatusNotFound, "Page not found", "Sign-in through an identity provider is not configured.")
		return
	}
	fail := func(status int, msg string, err error) {
		if err != nil {
			p.log.Warn("portal: sign-in failed", zap.String("reason", msg), zap.Error(err))
		}
		p.errorPage(w, r, nil, status, "Sign-in failed", msg)
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		p.log.Info("portal: the identity provider refused a sign-in", zap.String("error", oauthErrorCode(e)))
		fail(http.StatusUnauthorized, "The identity provider refused the sign-in.", nil)
		return
	}
	state := q.Get("state")
	c, err := r.Cookie(stateCookie)
	if err != nil || state == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(state)) != 1 {
		fail(http.StatusBadRequest, "This sign-in was not started in this browser, or it took too long. Start again.", nil)
		return
	}
	clearCookie(w, stateCookie)
	v, ok, err := takeOnce(r.Context(), p.kv, "oidc", state, p.now())
	if err != nil || !ok {
		fail(http.StatusBadRequest, "This sign-in has expired or was already used. Start again.", err)
		return
	}
	oc, err := p.provider(r.Context())
	if err != nil {
		fail(http.StatusBadGateway, "The identity provider cannot be reached. Try again shortly.", err)
		return
	}
	ctx := context.WithValue(r.Context(), oauth2.HTTPClient, p.client)
	tok, err := oc.conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(v.Verifier))
	if err != nil {
		fail(http.StatusUnauthorized, "The identity provider did not accept the sign-in code.", err)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := oc.verifier.Verify(oidc.ClientContext(r.Context(), p.client), raw)
	if err != nil {
		fail(http.StatusUnauthorized, "The identity token could not be verified.", err)
		return
	}
	if keyops.CheckText("sub", idt.Subject) != nil {
		// The subject names the user in the audit log.
		fail(http.StatusUnauthorized, "The identity token names you with characters that cannot be shown.", nil)
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(v.Nonce)) != 1 {
		fail(http.StatusUnauthorized, "The identity token does not belong to this sign-in.", nil)
		return
	}
	// The claims are read strictly (package strictjson): a token whose
	// payload has duplicate or case-variant claim names, which parsers
	// read differently, names no one.
	var payload json.RawMessage
	var claims map[string]any
	cerr := idt.Claims(&payload)
	if cerr == nil {
		cerr = strictjson.Unmarshal(payload, &claims)
	}
	if cerr != nil || claims == nil {
		fail(http.StatusUnauthorized, "The identity token could not be read.", cerr)
		return
	}
	display := firstString(claims, "email", "preferred_username", "name")
	if display == "" {
		display = idt.Subject
	}
	consumer, err := p.consumerFor(r.Context(), claims[p.cfg.ConsumerClaim])
	if err != nil {
		fail(http.StatusServiceUnavailable, "Your account could not be looked up. Try again shortly.", err)
		return
	}
	if consumer == "" {
		p.log.Info("portal: signed-in user has no consumer", zap.String("claim", p.cfg.ConsumerClaim))
		p.render(w, r, http.StatusForbidden, "noconsumer", nil, map[string]any{"Display": display})
		return
	}
	if p.startSession(w, r, consumer, "oidc:"+idt.Subject, display, "oidc") {
		http.Redirect(w, r, "/keys", http.StatusSeeOther)
	}
}

func firstString(claims map[string]any, names ...string) string {
	for _, n := range names {
		if s, ok := claims[n].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// consumerFor matches a claim's value (a string, or each string of a
// list) to a consumer: by id first, then by the configured metadata
// entry. A value that matches two consumers' metadata matches none.
func (p *Portal) consumerFor(ctx context.Context, claim any) (string, error) {
	var vals []string
	switch c := claim.(type) {
	case string:
		vals = []string{c}
	case []any:
		for _, v := range c {
			if s, ok := v.(string); ok {
				vals = append(vals, s)
			}
		}
	}
	vals = slices.DeleteFunc(vals, func(s string) bool { return s == "" })
	if len(vals) == 0 {
		return "", nil
	}
	// By id: one read each, not a read of every consumer (a sign-in is
	// open to anyone the provider knows).
	for _, v := range vals {
		c, err := p.ops.GetConsumer(ctx, v)
		if err == nil {
			return c.ID, nil
		}
		if !errors.Is(err, keystore.ErrConsumerNotFound) {
			return "", err
		}
	}
	if k := p.cfg.ConsumerMetadataKey; k != "" {
		cons, err := p.ops.ConsumersWhere(ctx, func(c *keystore.Consumer) bool {
			mv, ok := c.Metadata[k]
			return ok && slices.Contains(vals, mv)
		})
		if err != nil {
			return "", err
		}
		for _, v := range vals {
			var found []keystore.Consumer
			for _, c := range cons {
				if c.Metadata[k] == v {
					found = append(found, c)
				}
			}
			if len(found) == 1 {
				return found[0].ID, nil
			}
			if len(found) > 1 {
				p.log.Warn("portal: a claim value matches several consumers' metadata; none is chosen", zap.String("metadata_key", k))
			}
		}
	}
	return "", nil
}

// delegatedPage is where a one-time sign-in link lands: a page with one
// button that signs in (a POST), so that a mail scanner or a browser
// prefetching the link cannot use it up. It does not consume the link.
func (p *Portal) delegatedPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	p.render(w, r, http.StatusOK, "delegated", nil, map[string]any{"Token": r.PathValue("token")})
}

// delegated signs in with a one-time link made by the admin API. It works
// once and for SessionLinkTTL; whether it was used or expired is not told
// apart. The POST comes from the portal's own page (a cross-site POST is
// refused before this), so another site cannot sign a browser in to an
// account of its choosing.
func (p *Portal) delegated(w http.ResponseWriter, r *http.Request) {
	v, ok, err := takeOnce(r.Context(), p.kv, "link", r.PathValue("token"), p.now())
	if err != nil {
		p.log.Error("portal: session store", zap.Error(err))
		p.errorPage(w, r, nil, http.StatusServiceUnavailable, "Temporarily unavailable", "Try again shortly.")
		return
	}
	if !ok {
		p.errorPage(w, r, nil, http.StatusGone, "Link not valid", "This sign-in link was already used or has expired. Ask for a new one.")
		return
	}
	if _, err := p.ops.ShowConsumer(r.Context(), v.Consumer); err != nil {
		status, msg := http.StatusServiceUnavailable, "Try again shortly."
		if errors.Is(err, keystore.ErrConsumerNotFound) {
			status, msg = http.StatusForbidden, "The account this link was made for no longer exists."
		}
		p.errorPage(w, r, nil, status, "Link not valid", msg)
		return
	}
	if p.startSession(w, r, v.Consumer, v.Subject, v.Subject, "delegated") {
		http.Redirect(w, r, "/keys", http.StatusSeeOther)
	}
}

// devLogin is the development sign-in of demo mode: it signs in as the
// demo consumer. Outside demo mode it does not exist.
func (p *Portal) devLogin(w http.ResponseWriter, r *http.Request) {
	if p.demo == "" {
		p.errorPage(w, r, nil, http.StatusNotFound, "Page not found", "There is no such page.")
		return
	}
	if p.startSession(w, r, p.demo, "demo", "Demo user (development sign-in)", "demo") {
		http.Redirect(w, r, "/keys", http.StatusSeeOther)
	}
}

// logout ends the session, here and on every replica.
func (p *Portal) logout(w http.ResponseWriter, r *http.Request, sess *Session) {
	token, _ := r.Context().Value(tokenCtxKey{}).(string)
	if err := p.sessions.delete(r.Context(), token); err != nil {
		p.log.Error("portal: session store", zap.Error(err))
	}
	clearCookie(w, cookieName)
	p.audit(r.Context(), p.actor(r, sess), "portal.sign_out", sess.Consumer, nil, nil)
	http.Redirect(w, r, "/?signed_out=1", http.StatusSeeOther)
}

// oauthErrorCode is an OAuth error code fit to log: RFC 6749 codes are
// short and of a small alphabet; anything else is not logged as sent.
func oauthErrorCode(e string) string {
	if len(e) > 64 {
		return "(invalid)"
	}
	for _, c := range e {
		if (c < 'a' || c > 'z') && c != '_' {
			return "(invalid)"
		}
	}
	return e
}
