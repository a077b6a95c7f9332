package portal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keygate/keygate/product"

	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// keyRow is a key as the keys page lists it.
type keyRow struct {
	keystore.RecordView
	LastUsed *time.Time
	// Active is an active key that can still be rotated and revoked.
	Active bool
	// Expiring is a rotated key in its grace period: it works until
	// ExpiresAt, and is not rotated again (its replacement is).
	Expiring bool
	// Leaked is the banner of a key found in public ("found public at
	// <url> on <date>; revoked"); "" if it never was.
	Leaked string
}

func (p *Portal) keysPage(w http.ResponseWriter, r *http.Request, sess *Session) {
	recs, err := p.ops.ListKeys(r.Context(), keyops.KeyFilter{Consumer: sess.Consumer})
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	last, err := p.ops.LastUsed(r.Context(), recs)
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
		row.Expiring = row.Active && row.ReplacedBy != ""
		row.Leaked = keyops.LeakSummary(rec.Leak)
		rows = append(rows, row)
	}
	// Newest first: that is the key a customer just made or rotated.
	for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
		rows[i], rows[j] = rows[j], rows[i]
	}
	done := map[string]string{
		"revoked":  "The key was revoked. It stopped working at once.",
		"narrowed": "The key was narrowed. Every gateway applies it within a second.",
		"shown":    "A new key is shown only once, and it was: keygate keeps only its hash. If you did not copy it, rotate the key to get a new one.",
	}[r.URL.Query().Get("done")]
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
	noContext := len(c.Contexts) == 0 && !c.AnyContext
	if form == nil {
		form = map[string]string{"product": product.Extraction, "env": "live"}
	}
	if noContext {
		form["product"] = product.Registry // the one it may choose
	}
	offered, err := p.ops.Offered(r.Context(), sess.Consumer)
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	p.render(w, r, status, "newkey", sess, map[string]any{"Contexts": c.Contexts, "AnyContext": c.AnyContext, "NoContext": noContext,
		"Problem": problem, "Form": form, "Operations": offered})
}

// contextAllowed applies the portal's rule for the context of a new key:
// one of the consumer's contexts; any context only for a consumer marked
// any_context; none at all for a consumer that lists no contexts and is
// not so marked (it gets registry keys bound to no context, and asks
// support for extraction keys). It returns the problem for the page, or
// "".
func contextAllowed(c keystore.Consumer, ctx string) string {
	switch {
	case ctx == "" || c.AnyContext:
		return ""
	case len(c.Contexts) == 0:
		return "Your account has no processing context, so the portal cannot bind a key to one. Ask support to add your contexts; until then you can create schema registry keys."
	case !slices.Contains(c.Contexts, strings.ToLower(ctx)):
		return "Choose one of your account's contexts."
	}
	return ""
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
	c, err := p.consumer(r.Context(), sess)
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	if problem := contextAllowed(c, req.Context); problem != "" {
		p.newKeyForm(w, r, sess, http.StatusForbidden, problem, form)
		return
	}
	if err := req.Validate(); err != nil {
		p.newKeyForm(w, r, sess, http.StatusBadRequest, userMessage(err), form)
		return
	}
	if perms := f["permissions"]; len(perms) > 0 {
		if err := p.ops.CheckOperations(string(req.Product), perms); err != nil {
			p.newKeyForm(w, r, sess, http.StatusBadRequest, userMessage(err), form)
			return
		}
		if problem := p.beyondOffer(r, sess, string(req.Product), perms); problem != "" {
			p.newKeyForm(w, r, sess, http.StatusForbidden, problem, form)
			return
		}
		req.Permissions = perms
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
	p.issued(w, r, sess, key, rec, "created", 0)
}

// issued answers the POST that made a key with a redirect to the page
// that shows it once (POST-redirect-GET): a reload of that page shows
// nothing more and makes nothing. The key waits server-side, sealed and
// tied to the session (see putFlash). Should the flash store fail, the
// key is shown in this answer rather than lost.
func (p *Portal) issued(w http.ResponseWriter, r *http.Request, sess *Session, key string, rec keystore.Record, how string, grace time.Duration) {
	token, _ := r.Context().Value(tokenCtxKey{}).(string)
	handle, err := p.putFlash(r.Context(), token, issuedFlash{Key: key, ID: rec.ID, How: how, Grace: grace})
	if err != nil {
		p.log.Warn("portal: flash store failed; showing the new key in the POST's answer", zap.Error(err))
		p.showKey(w, r, sess, key, rec, how, grace)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/issued/"+handle, http.StatusSeeOther)
}

// issuedPage shows a new key, once: the flash is taken as it is read. A
// reload, or a handle of another session, goes to the keys page, which
// says that a key is shown only once.
func (p *Portal) issuedPage(w http.ResponseWriter, r *http.Request, sess *Session) {
	token, _ := r.Context().Value(tokenCtxKey{}).(string)
	f, err := p.takeFlash(r.Context(), token, r.PathValue("handle"))
	if errors.Is(err, errNoFlash) {
		http.Redirect(w, r, "/keys?done=shown", http.StatusSeeOther)
		return
	}
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	rec, err := p.ops.GetKey(r.Context(), f.ID)
	if err != nil || rec.Consumer != sess.Consumer {
		if err == nil {
			err = fmt.Errorf("portal: flash of key %s in a session of %s", f.ID, sess.Consumer)
		}
		p.storeError(w, r, sess, err)
		return
	}
	p.showKey(w, r, sess, f.Key, rec, f.How, f.Grace)
}

// showKey is the one response that carries a new key: no-store, and the
// key nowhere else (not in a log, not in the audit log, not in a URL).
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

// notRotatable answers 409 with a page that says why rec cannot be
// rotated (already rotated, revoked or expired) and reports true; it
// reports false for a key that can be. This is the customer's own state,
// not a failure: nothing is logged above info.
func (p *Portal) notRotatable(w http.ResponseWriter, r *http.Request, sess *Session, rec keystore.Record) bool {
	v := rec.View(p.now())
	var msg string
	switch {
	case v.Status == keystore.Revoked:
		msg = "This key was revoked, so it cannot be rotated. Create a new key instead."
	case v.Status == keystore.Expired:
		msg = "This key has expired, so it cannot be rotated. Create a new key instead."
	case v.ReplacedBy != "":
		msg = "This key was already rotated: its replacement is " + v.ReplacedBy + ", and it keeps working only until " + when(v.ExpiresAt) + ". To rotate again, rotate " + v.ReplacedBy + "."
	default:
		return false
	}
	p.errorPage(w, r, sess, http.StatusConflict, "Already rotated", msg)
	return true
}

func (p *Portal) rotatePage(w http.ResponseWriter, r *http.Request, sess *Session) {
	rec, ok := p.ownKey(w, r, sess)
	if !ok || p.notRotatable(w, r, sess, rec) {
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
	if !ok || p.notRotatable(w, r, sess, rec) {
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
		// Rotated, revoked or expired since it was read (another tab):
		// say so from its state now.
		if errors.Is(err, keystore.ErrRotated) || errors.Is(err, keystore.ErrRevoked) || errors.Is(err, keystore.ErrExpired) {
			if now, gerr := p.ops.GetKey(r.Context(), rec.ID); gerr == nil && p.notRotatable(w, r, sess, now) {
				return
			}
			p.errorPage(w, r, sess, http.StatusConflict, "Cannot rotate", userMessage(err))
			return
		}
		if errors.Is(err, keyops.ErrInvalid) || errors.Is(err, keystore.ErrContextNotAllowed) {
			p.errorPage(w, r, sess, http.StatusConflict, "Cannot rotate", userMessage(err))
			return
		}
		p.storeError(w, r, sess, err)
		return
	}
	p.issued(w, r, sess, key, nrec, "rotated", grace)
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
	done := map[string]string{
		"sent":       "Your request was recorded. Support will get back to you.",
		"unnotified": "Your request was recorded, but support could not be notified right away; they will see it in the audit log.",
	}[r.URL.Query().Get("done")]
	p.limitRequestForm(w, r, sess, http.StatusOK, "", done, nil)
}

// The periods a limit request offers, for a rate and for a quota.
var (
	ratePers  = []period{{"1s", "second"}, {"1m0s", "minute"}, {"1h0m0s", "hour"}}
	quotaPers = []period{{"1h0m0s", "hour"}, {"24h0m0s", "day"}, {"720h0m0s", "30 days"}}
)

// period is a choice of the limit request's per fields.
type period struct{ Value, Label string }

func (p *Portal) limitRequestForm(w http.ResponseWriter, r *http.Request, sess *Session, status int, problem, done string, form map[string]string) {
	recs, err := p.ops.ListKeys(r.Context(), keyops.KeyFilter{Consumer: sess.Consumer, Status: keystore.Active})
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	if form == nil {
		form = map[string]string{"per": ratePers[0].Value, "quota_per": quotaPers[1].Value}
	}
	p.render(w, r, status, "limitrequest", sess, map[string]any{"Keys": recs, "Problem": problem, "Done": done, "Form": form,
		"RatePers": ratePers, "QuotaPers": quotaPers})
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
	// Rate is "REQUESTS/PERIOD" such as "50/1s"; Quota such as
	// "100000/24h0m0s". Each is within the bounds of any limit
	// (policy.CheckFields), or left out.
	Rate   string `json:"requested_rate,omitempty"`
	Quota  string `json:"requested_quota,omitempty"`
	Reason string `json:"reason"`
}

// parseLimitRequest reads the rate and quota asked for and holds them to
// the bounds every limit has; the problem is for the page.
func parseLimitRequest(form map[string]string) (rate, quota, problem string) {
	pick := func(v string, from []period) (time.Duration, bool) {
		for _, p := range from {
			if p.Value == v {
				d, err := time.ParseDuration(v)
				return d, err == nil
			}
		}
		return 0, false
	}
	var f policy.Fields
	if form["rate"] != "" {
		n, err := strconv.ParseFloat(form["rate"], 64)
		per, ok := pick(form["per"], ratePers)
		if err != nil || !ok {
			return "", "", "Give the rate as a number of requests, and choose per second, minute or hour."
		}
		f.Rate, f.Per = &n, &per
		rate = strconv.FormatFloat(n, 'g', -1, 64) + "/" + per.String()
	}
	if form["quota"] != "" {
		n, err := strconv.ParseInt(form["quota"], 10, 64)
		per, ok := pick(form["quota_per"], quotaPers)
		if err != nil || !ok {
			return "", "", "Give the quota as a whole number of requests, and choose per hour, day or 30 days."
		}
		q := policy.Quota{Requests: n, Per: per}
		f.Quota = &q
		quota = q.String()
	}
	var fe *policy.FieldError
	if errors.As(policy.CheckFields(f), &fe) {
		return "", "", "The " + strings.ReplaceAll(fe.Field, ".", " ") + " asked for is out of bounds: it " + fe.Msg + "."
	}
	return rate, quota, ""
}

// limitRequest records a request for a higher limit and answers with a
// redirect to the form (POST-redirect-GET), which says it was sent: a
// reload sends nothing more.
func (p *Portal) limitRequest(w http.ResponseWriter, r *http.Request, sess *Session) {
	f := r.PostForm
	form := map[string]string{"key": f.Get("key"), "rate": strings.TrimSpace(f.Get("rate")), "per": f.Get("per"),
		"quota": strings.TrimSpace(f.Get("quota")), "quota_per": f.Get("quota_per"), "reason": strings.TrimSpace(f.Get("reason"))}
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
	// The reason is free text over several lines; anything else that
	// prints as something other than itself is refused.
	if err := keyops.CheckText("reason", strings.NewReplacer("\r\n", " ", "\n", " ", "\t", " ").Replace(form["reason"])); err != nil {
		p.limitRequestForm(w, r, sess, http.StatusBadRequest, "The reason holds characters that cannot be shown (control or formatting characters).", "", form)
		return
	}
	rate, quota, problem := parseLimitRequest(form)
	if problem != "" {
		p.limitRequestForm(w, r, sess, http.StatusBadRequest, problem, "", form)
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
		Rate: rate, Quota: quota, Reason: form["reason"]}
	p.audit(r.Context(), p.actor(r, sess), "portal.limit_request", target, map[string]string{"rate": lr.Rate, "quota": lr.Quota, "reason": lr.Reason}, nil)
	done := "sent"
	if p.cfg.LimitRequestWebhook != "" {
		if err := p.postWebhook(r.Context(), lr); err != nil {
			p.log.Warn("portal: limit-request webhook failed", zap.Error(err))
			done = "unnotified"
		}
	}
	http.Redirect(w, r, "/limits/request?done="+done, http.StatusSeeOther)
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
