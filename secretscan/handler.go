package secretscan

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// Path is where GitHub sends alerts.
const Path = "/v1/secret-scanning/github"

// Headers GitHub signs its alerts with.
const (
	HeaderSignature = "GITHUB-PUBLIC-KEY-SIGNATURE"
	HeaderKeyID     = "GITHUB-PUBLIC-KEY-IDENTIFIER"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultMaxMatches   = 1000
	DefaultReplayWindow = 10 * time.Minute
	maxReplays          = 10000
)

// Lookup finds a key's record by the key's hash: the request path's own
// lookup (keystore.FileStore, keystore.RedisStore).
type Lookup interface {
	Lookup(ctx context.Context, h keystore.Hash) (keystore.Record, bool, error)
}

// Reporter acts on a leaked key and audits it (keyops.Service).
type Reporter interface {
	ReportLeak(ctx context.Context, a keyops.Actor, l keyops.Leak) (keystore.Record, keyops.LeakAction, error)
}

// AdminTokenLookup finds an admin token by its hash (the keystore
// backend's admin); AdminTokenRevoker revokes one and audits it
// (admintoken.Service).
type AdminTokenLookup interface {
	LookupAdminToken(ctx context.Context, h keystore.Hash) (keystore.AdminToken, bool, error)
}

// AdminTokenRevoker: see AdminTokenLookup.
type AdminTokenRevoker interface {
	Revoke(ctx context.Context, a keyops.Actor, id string) (keystore.AdminToken, error)
}

// Notice is what the key's owner is told about a leak (Notifier).
type Notice struct {
	Event    string    `json:"event"` // "key.leaked"
	KeyID    string    `json:"key_id"`
	Consumer string    `json:"consumer,omitempty"`
	Env      string    `json:"env"`
	URL      string    `json:"url"`
	Source   string    `json:"source"`
	Action   string    `json:"action"`
	FoundAt  time.Time `json:"found_at"`
	// ExpiresAt is the end of a quarantine; nil otherwise.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Notifier tells the owner (Webhook); Notify must not block for long.
type Notifier interface {
	Notify(n Notice)
}

// Config configures a Handler.
type Config struct {
	// Keys verifies signatures. Required.
	Keys *Keys
	// Lookup finds keys by hash; Reporter acts on them. Required.
	Lookup   Lookup
	Reporter Reporter
	// Policy is the action per environment; a missing env means revoke.
	Policy map[keystore.Env]keyops.LeakAction
	// QuarantineGrace is how long a quarantined key keeps working.
	QuarantineGrace time.Duration
	// AdminTokens and RevokeAdminToken, both set, make leaked admin
	// tokens (kga_…) revoked at once whatever the policy; unset, they
	// are labelled false_positive.
	AdminTokens      AdminTokenLookup
	RevokeAdminToken AdminTokenRevoker
	// Notifier tells the owner; nil tells no one.
	Notifier Notifier
	// Logger; nil means zap.NewNop. Lines never carry a token.
	Logger *zap.Logger
	// Registerer takes keygate_leaked_keys_total; nil registers nothing.
	Registerer prometheus.Registerer
	// MaxBodyBytes, MaxMatches and ReplayWindow: 0 means the defaults.
	MaxBodyBytes int64
	MaxMatches   int
	ReplayWindow time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Handler answers alerts. It is safe for concurrent use.
type Handler struct {
	cfg     Config
	log     *zap.Logger
	leaks   *prometheus.CounterVec
	replays replays
}

// New checks cfg and returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Keys == nil || cfg.Lookup == nil || cfg.Reporter == nil {
		return nil, errors.New("secretscan: keys, lookup and reporter are required")
	}
	for env, a := range cfg.Policy {
		if !env.Valid() || !a.Valid() {
			return nil, errors.New("secretscan: policy: env must be live or test, action revoke, quarantine or notify")
		}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxMatches <= 0 {
		cfg.MaxMatches = DefaultMaxMatches
	}
	if cfg.ReplayWindow <= 0 {
		cfg.ReplayWindow = DefaultReplayWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	h := &Handler{cfg: cfg, log: cfg.Logger.Named("secretscan")}
	h.replays = replays{window: cfg.ReplayWindow, max: maxReplays, now: cfg.Now, m: map[[32]byte]*answer{}}
	h.leaks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_leaked_keys_total",
		Help: "Keys reported leaked by secret scanning, by the action taken (revoke, quarantine, notify, none).",
	}, []string{"action"})
	for _, a := range []keyops.LeakAction{keyops.LeakRevoke, keyops.LeakQuarantine, keyops.LeakNotify, keyops.LeakNone} {
		h.leaks.WithLabelValues(string(a))
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(h.leaks); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// MaxBodyBytes is the body cap, for the route table's row.
func (h *Handler) MaxBodyBytes() int64 { return h.cfg.MaxBodyBytes }

// Feedback is one entry of the answer, in GitHub's feedback shape. It
// carries the token's SHA-256 (hex), never the token.
type Feedback struct {
	TokenHash string `json:"token_hash"`
	TokenType string `json:"token_type"`
	Label     string `json:"label"`
}

// Labels of Feedback.
const (
	TruePositive  = "true_positive"
	FalsePositive = "false_positive"
)

// actor is who acts on leaked keys in the audit log.
var actor = keyops.Actor{ID: "secret-scanning:github"}

// ServeHTTP verifies, parses, acts and answers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, http.StatusMethodNotAllowed, "method not allowed: alerts are POSTed", "method")
		return
	}
	if r.ContentLength > h.cfg.MaxBodyBytes {
		h.refuse(w, http.StatusRequestEntityTooLarge, "alert body too large", "too_large")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.cfg.MaxBodyBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.refuse(w, http.StatusRequestEntityTooLarge, "alert body too large", "too_large")
			return
		}
		h.refuse(w, http.StatusBadRequest, "alert body could not be read", "read")
		return
	}
	if int64(len(body)) > h.cfg.MaxBodyBytes {
		h.refuse(w, http.StatusRequestEntityTooLarge, "alert body too large", "too_large")
		return
	}
	// The signature comes first: nothing of an unsigned body is parsed.
	if reason := h.verify(r, body); reason != "" {
		h.refuse(w, http.StatusUnauthorized, "alert signature invalid or missing", reason)
		return
	}
	sum := sha256.Sum256(body)
	a, first := h.replays.begin(sum)
	if !first {
		<-a.done
		h.log.Info("secret-scanning alert replayed", zap.Int("status", a.status))
		h.write(w, a.status, a.body)
		return
	}
	status, out, keep := h.handle(r.Context(), body)
	h.replays.finish(sum, a, status, out, keep)
	h.write(w, status, out)
}

// write sends a feedback body (200) or a refusal whose message is out.
func (h *Handler) write(w http.ResponseWriter, status int, out []byte) {
	if status != http.StatusOK {
		writeJSON(w, status, problem(w, string(out)))
		return
	}
	writeJSON(w, status, out)
}

// verify checks the signature headers against body; it returns "" when
// they hold, else a reason for the log.
func (h *Handler) verify(r *http.Request, body []byte) string {
	id, sig := r.Header.Get(HeaderKeyID), r.Header.Get(HeaderSignature)
	if id == "" || sig == "" {
		return "signature_missing"
	}
	der, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return "signature_encoding"
	}
	pub, ok := h.cfg.Keys.Key(r.Context(), id)
	if !ok {
		return "unknown_key_id"
	}
	d := sha256.Sum256(body)
	if !ecdsa.VerifyASN1(pub, d[:], der) {
		return "signature_mismatch"
	}
	return ""
}

// handle parses a verified body and acts on its matches. It returns the
// feedback (200) or a refusal's message, and keep false for an answer
// GitHub should retry (a store failure).
func (h *Handler) handle(ctx context.Context, body []byte) (status int, out []byte, keep bool) {
	ms, err := ParseAlert(body, h.cfg.MaxMatches)
	if errors.Is(err, ErrTooManyMatches) {
		h.log.Info("secret-scanning alert refused", zap.String("reason", "too_many_matches"))
		return http.StatusRequestEntityTooLarge, []byte(err.Error()), true
	}
	if err != nil {
		h.log.Info("secret-scanning alert refused", zap.String("reason", "malformed"))
		return http.StatusBadRequest, []byte(err.Error()), true
	}
	fb := make([]Feedback, 0, len(ms))
	var positives int
	for _, m := range ms {
		label, err := h.match(ctx, m)
		if err != nil {
			h.log.Error("secret-scanning alert failed", zap.Error(err))
			return http.StatusServiceUnavailable, []byte("the key store could not be read or changed; retry later"), false
		}
		if label == TruePositive {
			positives++
		}
		th := sha256.Sum256([]byte(m.Token))
		fb = append(fb, Feedback{TokenHash: hex.EncodeToString(th[:]), TokenType: m.Type, Label: label})
	}
	h.log.Info("secret-scanning alert", zap.Int("matches", len(ms)), zap.Int("true_positives", positives))
	b, _ := json.Marshal(fb)
	return http.StatusOK, b, true
}

// match acts on one match and returns its label. Only tokens that are
// keys of this keystore leave a trace (the audit event and the log line
// name the key's id, never the token).
func (h *Handler) match(ctx context.Context, m Match) (string, error) {
	if strings.HasPrefix(m.Token, keystore.AdminTokenPrefix) {
		return h.matchAdminToken(ctx, m)
	}
	env, err := keystore.Parse(m.Token)
	if err != nil {
		return FalsePositive, nil
	}
	rec, ok, err := h.cfg.Lookup.Lookup(ctx, keystore.HashKey(m.Token))
	if err != nil {
		return "", err
	}
	if !ok {
		return FalsePositive, nil
	}
	action, set := h.cfg.Policy[env]
	if !set {
		action = keyops.LeakRevoke
	}
	after, taken, err := h.cfg.Reporter.ReportLeak(ctx, actor, keyops.Leak{KeyID: rec.ID, URL: m.URL, Source: m.Source, Action: action, Grace: h.cfg.QuarantineGrace})
	if errors.Is(err, keystore.ErrNotFound) {
		return FalsePositive, nil // deleted between lookup and report
	}
	if err != nil {
		return "", err
	}
	h.leaks.WithLabelValues(string(taken)).Inc()
	h.log.Warn("key found public", zap.String("key_id", rec.ID), zap.String("consumer", after.Consumer),
		zap.String("url", m.URL), zap.String("source", m.Source), zap.String("action", string(taken)))
	if h.cfg.Notifier != nil && taken != keyops.LeakNone {
		n := Notice{Event: "key.leaked", KeyID: rec.ID, Consumer: after.Consumer, Env: string(env), URL: m.URL, Source: m.Source, Action: string(taken), FoundAt: h.cfg.Now().UTC().Truncate(time.Second)}
		if taken == keyops.LeakQuarantine && !after.ExpiresAt.IsZero() {
			t := after.ExpiresAt
			n.ExpiresAt = &t
		}
		h.cfg.Notifier.Notify(n)
	}
	return TruePositive, nil
}

// matchAdminToken revokes a leaked admin token: an admin token in public
// is never left working.
func (h *Handler) matchAdminToken(ctx context.Context, m Match) (string, error) {
	if h.cfg.AdminTokens == nil || h.cfg.RevokeAdminToken == nil || keystore.ParseAdminToken(m.Token) != nil {
		return FalsePositive, nil
	}
	tok, ok, err := h.cfg.AdminTokens.LookupAdminToken(ctx, keystore.HashKey(m.Token))
	if err != nil {
		return "", err
	}
	if !ok {
		return FalsePositive, nil
	}
	taken := keyops.LeakRevoke
	if tok.StateAt(h.cfg.Now()) != keystore.Active {
		taken = keyops.LeakNone
	} else if _, err := h.cfg.RevokeAdminToken.Revoke(ctx, actor, tok.ID); errors.Is(err, keystore.ErrAdminTokenRevoked) || errors.Is(err, keystore.ErrAdminTokenNotFound) {
		taken = keyops.LeakNone
	} else if err != nil {
		return "", err
	}
	h.leaks.WithLabelValues(string(taken)).Inc()
	h.log.Warn("admin token found public", zap.String("admin_token_id", tok.ID), zap.String("url", m.URL), zap.String("source", m.Source), zap.String("action", string(taken)))
	if h.cfg.Notifier != nil && taken != keyops.LeakNone {
		h.cfg.Notifier.Notify(Notice{Event: "admin_token.leaked", KeyID: tok.ID, URL: m.URL, Source: m.Source, Action: string(taken), FoundAt: h.cfg.Now().UTC().Truncate(time.Second)})
	}
	return TruePositive, nil
}

func (h *Handler) refuse(w http.ResponseWriter, status int, msg, reason string) {
	h.log.Info("secret-scanning alert refused", zap.String("reason", reason))
	writeJSON(w, status, problem(w, msg))
}

// problem is the spec's error body, with the trace id the gateway gave
// the request (X-Trace-Id), or a new one.
func problem(w http.ResponseWriter, msg string) []byte {
	id := w.Header().Get("X-Trace-Id")
	if id == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		w.Header().Set("X-Trace-Id", id)
	}
	b, _ := json.Marshal(struct {
		StateText string
		TraceId   string //nolint:revive // the spec's field name
		Messages  []string
	}{"ERROR", id, []string{msg}})
	return b
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
