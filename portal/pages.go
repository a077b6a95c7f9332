package portal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keygate/keygate/product"

	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// keyRow is a key as the keys page lists it.
type keyRow struct {
	keystore.RecordView
	LastUsed *time.Time
	Active   bool
}

func (p *Portal) keysPage(w http.ResponseWriter, r *http.Request, sess *Session) {
	recs, err := p.ops.ListKeys(r.Context(), keyops.KeyFilter{Consumer: sess.Consumer})
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	last, err := p.ops.LastUsed(r.Context())
	if err != nil {
		p.log.Warn("portal: last use unavailable", zap.Error(err))
	}
	now := p.now()
	rows := make([]keyRow, 0, len(recs))
	for _, rec := range recs {
		row := keyRow{RecordView: rec.View(now)}
		if t, ok := last[rec.ID]; ok {
			row.LastUsed = &t
		}
		row.Active = row.Status == keystore.Active
		rows = append(rows, row)
	}
	// Newest first: that is the key a customer just made or rotated.
	for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
		rows[i], rows[j] = rows[j], rows[i]
	}
	done := map[string]string{"revoked": "The key was revoked. It stopped working at once."}[r.URL.Query().Get("done")]
	p.render(w, r, http.StatusOK, "keys", sess, map[string]any{"Keys": rows, "Done": done})
}

// consumer returns the session's consumer.
func (p *Portal) consumer(ctx context.Context, sess *Session) (keystore.Consumer, error) {
	d, err := p.ops.ShowConsumer(ctx, sess.Consumer)
	return d.Consumer, err
}

func (p *Portal) newKeyPage(w http.ResponseWriter, r *http.Request, sess *Session) {
	p.newKeyForm(w, r, sess, http.StatusOK, "", nil)
}

func (p *Portal) newKeyForm(w http.ResponseWriter, r *http.Request, sess *Session, status int, problem string, form map[string]string) {
	c, err := p.consumer(r.Context(), sess)
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	if form == nil {
		form = map[string]string{"product": product.Extraction, "env": "live"}
	}
	p.render(w, r, status, "newkey", sess, map[string]any{"Contexts": c.Contexts, "Problem": problem, "Form": form})
}

// maxName caps names and free text the portal stores.
const maxName = 100

func (p *Portal) createKey(w http.ResponseWriter, r *http.Request, sess *Session) {
	f := r.PostForm
	form := map[string]string{"product": f.Get("product"), "env": f.Get("env"), "name": strings.TrimSpace(f.Get("name")), "context": strings.TrimSpace(f.Get("context"))}
	if utf8.RuneCountInString(form["name"]) > maxName {
		p.newKeyForm(w, r, sess, http.StatusBadRequest, fmt.Sprintf("The name is too long (at most %d characters).", maxName), form)
		return
	}
	req := keystore.IssueRequest{
		Product: keystore.Product(form["product"]), Env: keystore.Env(form["env"]),
		Context: form["context"], Name: form["name"], Consumer: sess.Consumer,
	}
	if err := req.Validate(); err != nil {
		p.newKeyForm(w, r, sess, http.StatusBadRequest, userMessage(err), form)
		return
	}
	key, rec, err := p.ops.IssueKey(r.Context(), p.actor(r, sess), req)
	if err != nil {
		if errors.Is(err, keyops.ErrInvalid) || errors.Is(err, keystore.ErrContextNotAllowed) {
			p.newKeyForm(w, r, sess, http.StatusBadRequest, userMessage(err), form)
			return
		}
		p.storeError(w, r, sess, err)
		return
	}
	p.showKey(w, r, sess, key, rec, "created", 0)
}

// showKey is the one response that carries a new key: no-store, and the
// key nowhere else (not in a log, not in the audit log).
func (p *Portal) showKey(w http.ResponseWriter, r *http.Request, sess *Session, key string, rec keystore.Record, how string, grace time.Duration) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	p.render(w, r, http.StatusOK, "keyshown", sess, map[string]any{
		"Key": key, "Record": rec.View(p.now()), "How": how, "Grace": graceText(grace), "API": p.cfg.APIURL,
	})
}

// ownKey returns the session's consumer's key with the id in the path.
// Another consumer's key, or no key, is the same "not found": a session
// cannot tell whether an id exists elsewhere.
func (p *Portal) ownKey(w http.ResponseWriter, r *http.Request, sess *Session) (keystore.Record, bool) {
	rec, err := p.ops.GetKey(r.Context(), r.PathValue("id"))
	if err == nil && rec.Consumer == sess.Consumer && sess.Consumer != "" {
		return rec, true
	}
	if err != nil && !errors.Is(err, keystore.ErrNotFound) && !errors.Is(err, keyops.ErrInvalid) {
		p.storeError(w, r, sess, err)
		return keystore.Record{}, false
	}
	p.errorPage(w, r, sess, http.StatusNotFound, "Key not found", "You have no key with this id.")
	return keystore.Record{}, false
}

// grace is a grace period a rotation may choose.
type grace struct {
	Value string // what the form sends
	Label string
	D     time.Duration
}

// graces are the configured grace periods, labelled.
func (p *Portal) graces() []grace {
	out := make([]grace, 0, len(p.cfg.RotationGraces))
	for _, d := range p.cfg.RotationGraces {
		out = append(out, grace{Value: d.String(), Label: graceText(d), D: d})
	}
	return out
}

// graceText is a grace period in words.
func graceText(d time.Duration) string {
	switch {
	case d == 0:
		return "None: the old key stops at once"
	case d%(24*time.Hour) == 0:
		return plural(int(d/(24*time.Hour)), "day")
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	}
	return plural(int(d.Round(time.Second)/time.Second), "second")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}

func (p *Portal) rotatePage(w http.ResponseWriter, r *http.Request, sess *Session) {
	rec, ok := p.ownKey(w, r, sess)
	if !ok {
		return
	}
	gs := p.graces()
	def := gs[0].Value
	if len(gs) > 1 {
		def = gs[1].Value
	}
	p.render(w, r, http.StatusOK, "rotate", sess, map[string]any{"Record": rec.View(p.now()), "Graces": gs, "Default": def})
}

func (p *Portal) rotateKey(w http.ResponseWriter, r *http.Request, sess *Session) {
	rec, ok := p.ownKey(w, r, sess)
	if !ok {
		return
	}
	grace := time.Duration(-1)
	for _, g := range p.graces() {
		if r.PostForm.Get("grace") == g.Value {
			grace = g.D
		}
	}
	if grace < 0 {
		p.errorPage(w, r, sess, http.StatusBadRequest, "Bad request", "Choose one of the grace periods offered.")
		return
	}
	key, nrec, err := p.ops.RotateKey(r.Context(), p.actor(r, sess), rec.ID, grace)
	if err != nil {
		if errors.Is(err, keyops.ErrInvalid) || errors.Is(err, keystore.ErrContextNotAllowed) || errors.Is(err, keystore.ErrRevoked) {
			p.errorPage(w, r, sess, http.StatusConflict, "Cannot rotate", userMessage(err))
			return
		}
		p.storeError(w, r, sess, err)
		return
	}
	p.showKey(w, r, sess, key, nrec, "rotated", grace)
}

func (p *Portal) revokePage(w http.ResponseWriter, r *http.Request, sess *Session) {
	rec, ok := p.ownKey(w, r, sess)
	if !ok {
		return
	}
	p.render(w, r, http.StatusOK, "revoke", sess, map[string]any{"Record": rec.View(p.now())})
}

func (p *Portal) revokeKey(w http.ResponseWriter, r *http.Request, sess *Session) {
	rec, ok := p.ownKey(w, r, sess)
	if !ok {
		return
	}
	if r.PostForm.Get("confirm") != rec.ID {
		p.errorPage(w, r, sess, http.StatusBadRequest, "Not confirmed", "Confirm the revocation on the previous page.")
		return
	}
	if _, err := p.ops.RevokeKey(r.Context(), p.actor(r, sess), rec.ID); err != nil {
		if errors.Is(err, keystore.ErrRevoked) || errors.Is(err, keyops.ErrInvalid) {
			p.errorPage(w, r, sess, http.StatusConflict, "Cannot revoke", userMessage(err))
			return
		}
		p.storeError(w, r, sess, err)
		return
	}
	http.Redirect(w, r, "/keys?done=revoked", http.StatusSeeOther)
}

func (p *Portal) limitRequestPage(w http.ResponseWriter, r *http.Request, sess *Session) {
	p.limitRequestForm(w, r, sess, http.StatusOK, "", "", nil)
}

func (p *Portal) limitRequestForm(w http.ResponseWriter, r *http.Request, sess *Session, status int, problem, done string, form map[string]string) {
	recs, err := p.ops.ListKeys(r.Context(), keyops.KeyFilter{Consumer: sess.Consumer, Status: keystore.Active})
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	if form == nil {
		form = map[string]string{}
	}
	p.render(w, r, status, "limitrequest", sess, map[string]any{"Keys": recs, "Problem": problem, "Done": done, "Form": form})
}

// LimitRequest is the JSON the limit-request webhook receives.
type LimitRequest struct {
	Event    string    `json:"event"` // "limit_request"
	Time     time.Time `json:"time"`
	Consumer string    `json:"consumer"`
	// Key is the key the request is for; "" for all the consumer's keys.
	Key string `json:"key,omitempty"`
	// Subject is who asked (the audit log's actor).
	Subject string `json:"subject"`
	Rate    string `json:"requested_rate,omitempty"`
	Quota   string `json:"requested_quota,omitempty"`
	Reason  string `json:"reason"`
}

func (p *Portal) limitRequest(w http.ResponseWriter, r *http.Request, sess *Session) {
	f := r.PostForm
	form := map[string]string{"key": f.Get("key"), "rate": strings.TrimSpace(f.Get("rate")), "quota": strings.TrimSpace(f.Get("quota")), "reason": strings.TrimSpace(f.Get("reason"))}
	switch {
	case form["rate"] == "" && form["quota"] == "":
		p.limitRequestForm(w, r, sess, http.StatusBadRequest, "Say which limit you need: a rate, a quota, or both.", "", form)
		return
	case form["reason"] == "":
		p.limitRequestForm(w, r, sess, http.StatusBadRequest, "Say why you need it: support decides from that.", "", form)
		return
	case utf8.RuneCountInString(form["rate"]) > maxName || utf8.RuneCountInString(form["quota"]) > maxName || utf8.RuneCountInString(form["reason"]) > 2000:
		p.limitRequestForm(w, r, sess, http.StatusBadRequest, "The request is too long.", "", form)
		return
	}
	target := sess.Consumer
	if form["key"] != "" {
		rec, err := p.ops.GetKey(r.Context(), form["key"])
		if err != nil || rec.Consumer != sess.Consumer {
			p.limitRequestForm(w, r, sess, http.StatusBadRequest, "Choose one of your keys.", "", form)
			return
		}
		target = rec.ID
	}
	lr := LimitRequest{Event: "limit_request", Time: p.now().UTC(), Consumer: sess.Consumer, Key: form["key"], Subject: sess.Subject,
		Rate: form["rate"], Quota: form["quota"], Reason: form["reason"]}
	p.audit(r.Context(), p.actor(r, sess), "portal.limit_request", target, map[string]string{"rate": lr.Rate, "quota": lr.Quota, "reason": lr.Reason}, nil)
	done := "Your request was recorded. Support will get back to you."
	if p.cfg.LimitRequestWebhook != "" {
		if err := p.postWebhook(r.Context(), lr); err != nil {
			p.log.Warn("portal: limit-request webhook failed", zap.Error(err))
			done = "Your request was recorded, but support could not be notified right away; they will see it in the audit log."
		}
	}
	p.limitRequestForm(w, r, sess, http.StatusOK, "", done, nil)
}

func (p *Portal) postWebhook(ctx context.Context, lr LimitRequest) error {
	b, err := json.Marshal(lr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.LimitRequestWebhook, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "keygate-portal")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

// userMessage is an error's text for a person: without the package
// prefixes.
func userMessage(err error) string {
	s := err.Error()
	for _, p := range []string{"keyops: invalid request: ", "keystore: invalid request: ", "keystore: ", "keyops: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	if s != "" {
		s = strings.ToUpper(s[:1]) + s[1:]
	}
	return s
}

func (p *Portal) storeError(w http.ResponseWriter, r *http.Request, sess *Session, err error) {
	p.log.Error("portal: keystore", zap.Error(err))
	p.errorPage(w, r, sess, http.StatusServiceUnavailable, "Temporarily unavailable", "Your keys cannot be reached right now. Try again shortly.")
}
