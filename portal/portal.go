// Package portal is keygate's self-service portal: customers sign in
// (through the operator's OIDC identity provider, a one-time link made by
// the admin API, or, in demo mode only, a development sign-in) and then
// create, rotate and revoke their own keys, see their usage and limits,
// and ask for a higher limit.
//
// The portal is a client of package keyops, like the CLI and the admin
// API, so the same rules hold and every change reaches the same audit
// log, with the signed-in subject as the actor. Pages are rendered on the
// server from embedded templates and work without JavaScript; sessions
// are kept server-side (in process, or in Redis so every replica honours
// them); every POST carries a CSRF token; and a consumer's session can
// reach that consumer's keys only.
package portal

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/internal/inputcheck"
	"github.com/keygate/keygate/internal/statuswriter"

	"github.com/keygate/keygate/internal/capool"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Deps are what a Portal takes from its caller.
type Deps struct {
	// Ops manages keys and consumers. Required.
	Ops *keyops.Service
	// Auditor records sign-ins, sign-outs, sign-in links and limit
	// requests (keyops records key changes itself); nil records nothing.
	Auditor keyops.Auditor
	// Redis, when set, keeps sessions where every replica sees them;
	// nil keeps them in process.
	Redis       redis.UniversalClient
	RedisPrefix string
	Logger      *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Getenv reads oidc.client_secret_env; nil means no secret.
	Getenv func(string) string
	// HTTPClient reaches the identity provider and the webhook; nil
	// means a client with 10 s timeouts.
	HTTPClient *http.Client
	// ClientAddr is the client address of a request (behind trusted
	// proxies, from X-Forwarded-For); nil means the TCP peer.
	ClientAddr func(*http.Request) netip.Addr
	// DemoConsumer, when set, turns on the development sign-in for that
	// consumer: `keygate demo` only. It is never read from a file.
	DemoConsumer string
	// Sunset, when set (auth.api_keys.deprecation), puts a banner on
	// every page: API keys stop working then; switch to tokens.
	// DeprecationLink is the migration guide, if any.
	Sunset          time.Time
	DeprecationLink string
	// TokenURL is keygate's token endpoint (auth.token_endpoint); the
	// banner's guide shows the exchange with it. Empty: the guide names
	// no endpoint.
	TokenURL string
}

// Portal serves the portal's pages.
type Portal struct {
	cfg      Config
	ops      *keyops.Service
	auditor  keyops.Auditor
	log      *zap.Logger
	now      func() time.Time
	getenv   func(string) string
	client   *http.Client
	addr     func(*http.Request) netip.Addr
	demo     string
	kv       kv
	sessions *sessions
	pages    map[string]*template.Template
	perAddr  *limiterSet
	perSess  *limiterSet

	sunset   time.Time
	depLink  string
	tokenURL string

	oidcMu sync.Mutex
	oidc   *oidcClient // discovered on first use
}

// SessionLinkTTL is how long a delegated sign-in link stays valid.
const SessionLinkTTL = 15 * time.Minute

// New checks cfg and builds a Portal.
func New(cfg Config, deps Deps) (*Portal, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err // it names the field within the section
	}
	if deps.Ops == nil {
		return nil, errors.New("portal: Deps.Ops is required")
	}
	p := &Portal{sunset: deps.Sunset, depLink: deps.DeprecationLink, tokenURL: deps.TokenURL, cfg: cfg, ops: deps.Ops, auditor: deps.Auditor, log: deps.Logger, now: deps.Now, getenv: deps.Getenv,
		client: deps.HTTPClient, addr: deps.ClientAddr, demo: deps.DemoConsumer}
	if p.auditor == nil {
		p.auditor = keyops.NopAuditor{}
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.getenv == nil {
		p.getenv = func(string) string { return "" }
	}
	if p.client == nil {
		c, err := httpClient(cfg.OIDC.CAFile)
		if err != nil {
			return nil, fieldpath.Errorf("oidc.ca_file", "%w", err)
		}
		p.client = c
	}
	if p.addr == nil {
		p.addr = func(r *http.Request) netip.Addr {
			ap, _ := netip.ParseAddrPort(r.RemoteAddr)
			return ap.Addr().Unmap()
		}
	}
	if deps.Redis != nil {
		p.kv = redisKV{c: deps.Redis, prefix: deps.RedisPrefix + "portal:"}
	} else {
		p.kv = newMemKV(p.now)
	}
	p.sessions = &sessions{kv: p.kv, now: p.now, maxAge: cfg.Session.MaxAge, idle: cfg.Session.IdleTimeout}
	p.perAddr = newLimiterSet(cfg.RateLimit.PerAddress, cfg.RateLimit.Burst, p.now)
	p.perSess = newLimiterSet(cfg.RateLimit.PerSession, cfg.RateLimit.Burst, p.now)
	var err error
	if p.pages, err = parsePages(); err != nil {
		return nil, err
	}
	return p, nil
}

// httpClient is the client for the identity provider and the webhook:
// 10 s timeouts, and the CAs of caFile trusted besides the system's.
func httpClient(caFile string) (*http.Client, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	if caFile == "" {
		return c, nil
	}
	pool, err := capool.WithSystem(caFile)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c.Transport = tr
	return c, nil
}

// URL is the portal's public base URL.
func (p *Portal) URL() string { return p.cfg.publicURL() }

// SessionLink makes a one-time sign-in URL for consumer, valid for
// SessionLinkTTL: the admin API's POST /v1/portal-sessions. subject names
// the user in the operator's own dashboard, for the audit log; "" means
// the admin who asked. The link works once.
func (p *Portal) SessionLink(ctx context.Context, by keyops.Actor, consumer, subject string) (string, time.Time, error) {
	now := p.now()
	ev := keyops.Event{Time: now, Actor: by, Action: "portal.session_link", Target: consumer}
	if _, err := p.ops.ShowConsumer(ctx, consumer); err != nil {
		return "", time.Time{}, err
	}
	if subject == "" {
		subject = by.ID
	}
	if len(subject) > 200 {
		return "", time.Time{}, fmt.Errorf("%w: subject: at most 200 characters", keyops.ErrInvalid)
	}
	if err := keyops.CheckText("subject", subject); err != nil {
		return "", time.Time{}, err
	}
	secret, err := putOnce(ctx, p.kv, "link", onceValue{Consumer: consumer, Subject: "delegated:" + subject}, now, SessionLinkTTL)
	ev.Err = err
	ev.Changes = map[string]string{"subject": subject}
	if aerr := p.auditor.Audit(ctx, ev); err == nil {
		err = aerr
	}
	if err != nil {
		return "", time.Time{}, err
	}
	return p.cfg.publicURL() + "/session/" + secret, now.Add(SessionLinkTTL), nil
}

// Handler serves the portal.
func (p *Portal) Handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(assetFS, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /{$}", p.home)
	mux.HandleFunc("GET /login", p.oidcStart)
	mux.HandleFunc("GET /callback", p.oidcCallback)
	mux.HandleFunc("GET /session/{token}", p.delegatedPage)
	mux.HandleFunc("POST /session/{token}", p.delegated)
	mux.HandleFunc("POST /dev-login", p.devLogin)
	mux.HandleFunc("GET /keys", p.signedIn(p.keysPage))
	mux.HandleFunc("GET /keys/new", p.signedIn(p.newKeyPage))
	mux.HandleFunc("POST /keys", p.signedIn(p.createKey))
	mux.HandleFunc("GET /issued/{handle}", p.signedIn(p.issuedPage))
	mux.HandleFunc("GET /keys/{id}/rotate", p.signedIn(p.rotatePage))
	mux.HandleFunc("POST /keys/{id}/rotate", p.signedIn(p.rotateKey))
	mux.HandleFunc("GET /keys/{id}/revoke", p.signedIn(p.revokePage))
	mux.HandleFunc("POST /keys/{id}/revoke", p.signedIn(p.revokeKey))
	mux.HandleFunc("GET /keys/{id}/permissions", p.signedIn(p.permissionsPage))
	mux.HandleFunc("POST /keys/{id}/permissions", p.signedIn(p.narrowKey))
	mux.HandleFunc("GET /usage", p.signedIn(p.usagePage))
	mux.HandleFunc("GET /limits/request", p.signedIn(p.limitRequestPage))
	mux.HandleFunc("POST /limits/request", p.signedIn(p.limitRequest))
	mux.HandleFunc("POST /logout", p.signedIn(p.logout))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p.errorPage(w, r, nil, http.StatusNotFound, "Page not found", "There is no such page.")
	})
	return p.guard(mux)
}

// guard sets the security headers of every response, limits requests per
// client address, refuses cross-site POSTs, and logs each request by its
// route (never its path, which may hold a one-time link).
func (p *Portal) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := p.now()
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		if r.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		sw := statuswriter.Wrap(w)
		addr := p.addr(r)
		switch {
		case !p.perAddr.allow(addr.String()):
			p.tooMany(sw, r)
		case r.Method == http.MethodPost && crossSite(r, p.scheme(r)):
			p.errorPage(sw, r, nil, http.StatusForbidden, "Request refused", "This form was sent from another site.")
		case queryProblem(r) != "":
			// One value per parameter (package inputcheck), as the admin
			// API: a page reads what every other parser of the URL reads.
			p.errorPage(sw, r, nil, http.StatusBadRequest, "Bad request", queryProblem(r))
		case r.Method == http.MethodPost && inputcheck.Charset(r.Header.Get("Content-Type")) != nil:
			// Forms are read as UTF-8; one declared otherwise would be misread.
			p.errorPage(sw, r, nil, http.StatusUnsupportedMediaType, "Unsupported form encoding",
				"The form was sent in a character set other than UTF-8 ("+inputcheck.Charset(r.Header.Get("Content-Type")).Error()+").")
		default:
			// The real ResponseWriter, so that net/http closes the
			// connection after a body over the cap; and net/http's own
			// body back in r afterwards, where it looks for it to close a
			// connection with an unread body gently (half-close, then wait).
			body := r.Body
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			next.ServeHTTP(sw, r)
			r.Body = body
		}
		route := r.Pattern
		if route == "" {
			route = "(none)"
		}
		p.log.Info("portal request",
			zap.String("method", r.Method), zap.String("route", route), zap.Int("status", sw.Status()),
			zap.String("remote", addr.String()), zap.Float64("duration_ms", float64(p.now().Sub(start))/float64(time.Millisecond)))
	})
}

// queryProblem says what is wrong with r's query (a parameter given
// twice, or one that cannot be read), or "".
func queryProblem(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	if _, err := inputcheck.Query(r.URL.RawQuery); err != nil {
		return "The address is not valid: " + err.Error() + "."
	}
	return ""
}

// crossSite reports whether a POST comes from another origin, by the
// browser's own word (Origin and Sec-Fetch-Site). An Origin must match
// the portal's own origin whole: scheme and host (with its port), so
// that http://host, a page served without TLS on the same host name, is
// another site. The CSRF token is the check that counts; this refuses
// earlier and covers the sign-in forms, which have no session yet.
func crossSite(r *http.Request, scheme string) bool {
	o := r.Header.Get("Origin")
	if o != "" && o != "null" && !strings.EqualFold(o, scheme+"://"+r.Host) {
		return true
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		// The portal's own pages send no referrer, so a browser
		// sends Origin: null with their forms.
		return false
	case "":
		return o == "null" // an opaque origin, by no other word
	}
	return true
}

// scheme is the scheme browsers reach the portal by: https when this
// connection is TLS, else (behind a TLS-terminating load balancer) the
// scheme of its public URL.
func (p *Portal) scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	if u, err := url.Parse(p.cfg.publicURL()); err == nil && u.Scheme != "" {
		return strings.ToLower(u.Scheme)
	}
	return "https"
}

func (p *Portal) tooMany(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	p.errorPage(w, r, nil, http.StatusTooManyRequests, "Too many requests", "Slow down and try again in a moment.")
}

// cookieName is the session cookie. The __Host- prefix makes browsers
// insist on Secure, Path=/ and no Domain.
const cookieName = "__Host-keygate_portal"

// stateCookie binds an OIDC sign-in in flight to the browser that began
// it.
const stateCookie = "__Host-keygate_oidc_state"

func (p *Portal) setSessionCookie(w http.ResponseWriter, token string) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/", Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: int(p.cfg.Session.MaxAge / time.Second)})
}

func clearCookie(w http.ResponseWriter, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: -1})
}

// signedIn runs h with the request's session; without one, a GET goes to
// the sign-in page and anything else is refused. A POST must carry the
// session's CSRF token. Requests are limited per session.
func (p *Portal) signedIn(h func(http.ResponseWriter, *http.Request, *Session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var token string
		if c, err := r.Cookie(cookieName); err == nil {
			token = c.Value
		}
		sess, ok, err := p.sessions.get(r.Context(), token)
		if err != nil {
			p.log.Error("portal: session store", zap.Error(err))
			p.errorPage(w, r, nil, http.StatusServiceUnavailable, "Temporarily unavailable", "The portal cannot read sessions right now. Try again shortly.")
			return
		}
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/", http.StatusSeeOther)
				return
			}
			p.errorPage(w, r, nil, http.StatusForbidden, "Signed out", "Your session has ended. Sign in again.")
			return
		}
		if !p.perSess.allow(storeKey("s", token)) {
			p.tooMany(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				p.errorPage(w, r, &sess, http.StatusBadRequest, "Bad request", "The form could not be read.")
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(sess.CSRF)) != 1 {
				p.errorPage(w, r, &sess, http.StatusForbidden, "Request refused", "This form has expired or did not come from this session. Reload the page and try again.")
				return
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), tokenCtxKey{}, token))
		h(w, r, &sess)
	}
}

type tokenCtxKey struct{}

// actor is who the audit log records for a session's action.
func (p *Portal) actor(r *http.Request, sess *Session) keyops.Actor {
	return keyops.Actor{ID: "portal:" + sess.Subject, Addr: p.addr(r).String()}
}

// audit records a portal event (sign-in, sign-out, limit request); a
// failure is logged, the action stands.
func (p *Portal) audit(ctx context.Context, a keyops.Actor, action, target string, changes map[string]string, err error) {
	if aerr := p.auditor.Audit(ctx, keyops.Event{Time: p.now(), Actor: a, Action: action, Target: target, Changes: changes, Err: err}); aerr != nil {
		p.log.Error("portal: audit", zap.String("action", action), zap.Error(aerr))
	}
}

// startSession stores a session, sets its cookie and records the sign-in.
func (p *Portal) startSession(w http.ResponseWriter, r *http.Request, consumer, subject, display, method string) bool {
	token, sess, err := p.sessions.create(r.Context(), consumer, subject, display)
	if err != nil {
		p.log.Error("portal: session store", zap.Error(err))
		p.errorPage(w, r, nil, http.StatusServiceUnavailable, "Temporarily unavailable", "The portal cannot start a session right now. Try again shortly.")
		return false
	}
	p.setSessionCookie(w, token)
	p.audit(r.Context(), p.actor(r, &sess), "portal.sign_in", consumer, map[string]string{"method": method}, nil)
	return true
}
