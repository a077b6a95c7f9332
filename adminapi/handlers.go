package adminapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/strictjson"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// Page sizes of the list endpoints.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// list is the body of every list endpoint.
type page[T any] struct {
	Items []T `json:"items"`
	// NextCursor is left out on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// cursor is a list position: the creation time and id of the last item
// of the previous page. Items are ordered by (created_at, id), so a
// deletion does not shift a page.
type cursor struct {
	T  int64  `json:"t"`
	ID string `json:"id"`
}

// cursorAt is the cursor of the item with id created at Unix second t.
func cursorAt(t int64, id string) string {
	b, _ := json.Marshal(cursor{t, id})
	return base64.RawURLEncoding.EncodeToString(b)
}

// pageOf is a page of items (none: an empty list, not null), with the
// cursor of next, where the next page starts after, when there is one.
func pageOf[T any](items []T, next *keystore.Position) page[T] {
	p := page[T]{Items: items}
	if p.Items == nil {
		p.Items = []T{}
	}
	if next != nil {
		p.NextCursor = cursorAt(next.Created, next.ID)
	}
	return p
}

// position is c's place in a list; nil for no cursor.
func (c *cursor) position() *keystore.Position {
	if c == nil {
		return nil
	}
	return &keystore.Position{Created: c.T, ID: c.ID}
}

func parsePage(q url.Values) (limit int, after *cursor, err error) {
	limit = defaultLimit
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxLimit {
			return 0, nil, badRequest("limit: must be a whole number from 1 to 1000")
		}
	}
	if s := q.Get("cursor"); s != "" {
		b, err := base64.RawURLEncoding.DecodeString(s)
		var c cursor
		if err != nil || strictjson.Unmarshal(b, &c) != nil || c.ID == "" {
			return 0, nil, badRequest("cursor: not a cursor this API returned")
		}
		after = &c
	}
	return limit, after, nil
}

// ---- consumers ----

// overrideBody is an override as requests write it. Each field set
// replaces that field; the others are kept.
type overrideBody struct {
	Rate  *float64 `json:"rate"`
	Per   *string  `json:"per"`
	Burst *int     `json:"burst"`
	// Quota is "REQUESTS/PERIOD" (50000/24h), "none", or
	// {"requests": N, "per": "24h"}.
	Quota json.RawMessage `json:"quota"`
	// Until is an RFC 3339 time, or "" for a permanent override.
	Until *string `json:"until"`
}

// quotaBody is the object form of a quota.
type quotaBody struct {
	Requests *int64  `json:"requests"`
	Per      *string `json:"per"`
}

// limitUpdate checks the fields against policy.CheckFields (the
// bounds every way in shares) and sets them in u; the error names the
// field.
func (o *overrideBody) limitUpdate(u *keyops.LimitUpdate) error {
	if o == nil {
		return nil
	}
	u.Rate, u.Burst = o.Rate, o.Burst
	if o.Per != nil {
		d, err := time.ParseDuration(*o.Per)
		if err != nil {
			return badRequest("override.per: want a duration such as 1s")
		}
		u.Per = &d
	}
	if err := policy.CheckFields(policy.Fields{Rate: u.Rate, Per: u.Per, Burst: u.Burst}); err != nil {
		return badRequest("override." + err.Error())
	}
	if len(o.Quota) > 0 && string(o.Quota) != "null" {
		var s string
		var q policy.Quota
		if strictjson.Unmarshal(o.Quota, &s) == nil {
			var err error
			if q, err = policy.ParseQuota(s); err != nil {
				if errors.Is(err, policy.ErrOutOfBounds) {
					return badRequest("override." + err.Error()) // names quota.requests or quota.per
				}
				return badRequest("override.quota: " + err.Error())
			}
		} else {
			var qb quotaBody
			if err := strictjson.Unmarshal(o.Quota, &qb); err != nil || qb.Requests == nil || qb.Per == nil {
				return badRequest(`override.quota: want "REQUESTS/PERIOD", "none" or {"requests": N, "per": "24h"}`)
			}
			d, err := time.ParseDuration(*qb.Per)
			if err != nil {
				return badRequest("override.quota.per: want a duration such as 24h")
			}
			q = policy.Quota{Requests: *qb.Requests, Per: d}
			if err := policy.CheckFields(policy.Fields{Quota: &q}); err != nil {
				return badRequest("override." + err.Error())
			}
		}
		u.Quota = &q
	}
	if o.Until != nil {
		var t time.Time
		if *o.Until != "" {
			var err error
			if t, err = time.Parse(time.RFC3339, *o.Until); err != nil {
				return badRequest("override.until: want an RFC 3339 time, or \"\" for a permanent override")
			}
		}
		u.Until = &t
	}
	return nil
}

type consumerCreateBody struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
	Contexts []string          `json:"contexts"`
	// AnyContext lets the portal bind the consumer's keys to any context.
	AnyContext bool          `json:"any_context"`
	Plan       string        `json:"plan"`
	Override   *overrideBody `json:"override"`
	// Permissions narrow its keys' operations; AllowedCIDRs the client
	// addresses they may be used from. Absent: no narrowing, any address.
	Permissions  []string `json:"permissions"`
	AllowedCIDRs []string `json:"allowed_cidrs"`
}

func (a *API) createConsumer(r *request) (response, error) {
	var b consumerCreateBody
	if err := r.decode(&b); err != nil {
		return response{}, err
	}
	spec := keyops.ConsumerSpec{Name: b.Name, Metadata: b.Metadata, Contexts: b.Contexts, AnyContext: b.AnyContext, Plan: b.Plan,
		Access: keyops.AccessUpdate{AllowedCIDRs: b.AllowedCIDRs}}
	if b.Permissions != nil {
		spec.Access.Permissions = &b.Permissions
	}
	if err := b.Override.limitUpdate(&spec.Limits); err != nil {
		return response{}, err
	}
	c, err := a.deps.Ops.CreateConsumer(r.Context(), r.actor(), spec)
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusCreated, body: c, location: "/v1/consumers/" + c.ID}, nil
}

func (a *API) listConsumers(r *request) (response, error) {
	limit, after, err := parsePage(r.URL.Query())
	if err != nil {
		return response{}, err
	}
	p, err := a.deps.Ops.ListConsumersPage(r.Context(), after.position(), limit)
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: pageOf(p.Consumers, p.Next)}, nil
}

func (a *API) getConsumer(r *request) (response, error) {
	d, err := a.deps.Ops.ShowConsumer(r.Context(), r.PathValue("id"))
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: d}, nil
}

// patchFields decodes a PATCH body into its fields, refusing any not in
// allowed.
func (r *request) patchFields(allowed ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := r.decode(&m); err != nil {
		return nil, err
	}
	for k := range m {
		if !contains(allowed, k) {
			return nil, badRequest("body: unknown field " + strconv.Quote(k) + "; the fields are " + strings.Join(allowed, ", "))
		}
	}
	if len(m) == 0 {
		return nil, badRequest("nothing to update")
	}
	return m, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func isNull(b json.RawMessage) bool { return string(b) == "null" }

func field[T any](m map[string]json.RawMessage, name string, into *T) error {
	if err := strictjson.Unmarshal(m[name], into); err != nil {
		return badRequest(name + ": " + err.Error())
	}
	return nil
}

// accessPatch reads "permissions" (a list of operations; [] or null goes
// back to the default) and "allowed_cidrs" (a list; [] or null allows any
// address).
func accessPatch(m map[string]json.RawMessage, u *keyops.AccessUpdate) error {
	if raw, ok := m["permissions"]; ok {
		perms := []string{}
		if !isNull(raw) {
			if err := field(m, "permissions", &perms); err != nil {
				return err
			}
		}
		u.Permissions = &perms
	}
	if raw, ok := m["allowed_cidrs"]; ok {
		var cidrs []string
		if !isNull(raw) {
			if err := field(m, "allowed_cidrs", &cidrs); err != nil {
				return err
			}
		}
		if len(cidrs) == 0 {
			u.ClearAllowedCIDRs = true
		} else {
			u.AllowedCIDRs = cidrs
		}
	}
	return nil
}

// limitPatch reads "plan" (a name, or "" or null for none) and
// "override" (null drops it; an object sets the fields it holds).
func limitPatch(m map[string]json.RawMessage, u *keyops.LimitUpdate) error {
	if raw, ok := m["plan"]; ok {
		plan := ""
		if !isNull(raw) {
			if err := field(m, "plan", &plan); err != nil {
				return err
			}
		}
		u.Plan = &plan
	}
	if raw, ok := m["override"]; ok {
		if isNull(raw) {
			u.ClearOverride = true
			return nil
		}
		var o overrideBody
		if err := strictjson.Unmarshal(raw, &o); err != nil {
			return badRequest("override: " + err.Error())
		}
		return o.limitUpdate(u)
	}
	return nil
}

func (a *API) updateConsumer(r *request) (response, error) {
	m, err := r.patchFields("name", "metadata", "contexts", "any_context", "plan", "override", "permissions", "allowed_cidrs")
	if err != nil {
		return response{}, err
	}
	var u keyops.ConsumerUpdate
	if _, ok := m["name"]; ok {
		u.Name = new(string)
		if err := field(m, "name", u.Name); err != nil {
			return response{}, err
		}
	}
	if _, ok := m["metadata"]; ok {
		var md map[string]*string
		if err := field(m, "metadata", &md); err != nil {
			return response{}, err
		}
		u.Metadata = map[string]string{}
		for k, v := range md {
			u.Metadata[k] = ""
			if v != nil {
				u.Metadata[k] = *v
			}
		}
	}
	if raw, ok := m["contexts"]; ok {
		ctxs := []string{}
		if !isNull(raw) {
			if err := field(m, "contexts", &ctxs); err != nil {
				return response{}, err
			}
		}
		u.Contexts = &ctxs
	}
	if raw, ok := m["any_context"]; ok {
		v := false
		if !isNull(raw) {
			if err := field(m, "any_context", &v); err != nil {
				return response{}, err
			}
		}
		u.AnyContext = &v
	}
	if err := limitPatch(m, &u.Limits); err != nil {
		return response{}, err
	}
	if err := accessPatch(m, &u.Access); err != nil {
		return response{}, err
	}
	c, err := a.deps.Ops.UpdateConsumer(r.Context(), r.actor(), r.PathValue("id"), u)
	if err != nil {
		return response{}, err
	}
	d, err := a.deps.Ops.ShowConsumer(r.Context(), c.ID)
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: d}, nil
}

func (a *API) deleteConsumer(r *request) (response, error) {
	if _, err := a.deps.Ops.DeleteConsumer(r.Context(), r.actor(), r.PathValue("id")); err != nil {
		return response{}, err
	}
	return response{status: http.StatusNoContent}, nil
}

// ---- keys ----

type keyCreateBody struct {
	Product  keystore.Product `json:"product"`
	Env      keystore.Env     `json:"env"`
	Context  string           `json:"context"`
	Name     string           `json:"name"`
	Consumer string           `json:"consumer"`
	// ExpiresIn is a duration such as 720h; "" for never.
	ExpiresIn string `json:"expires_in"`
	// Permissions are the operations the key may perform; absent: every
	// operation of its product. AllowedCIDRs are the client addresses it
	// may be used from; absent: any.
	Permissions  []string `json:"permissions"`
	AllowedCIDRs []string `json:"allowed_cidrs"`
}

// issued is a key as create and rotate answer: the key, once, and its
// detail. The copy kept for an Idempotency-Key replay has no key, and
// Note says why.
type issued struct {
	Key  string `json:"key,omitempty"`
	Note string `json:"note,omitempty"`
	keyops.KeyDetail
}

const (
	noteShown    = "store this key now: it is shown only once and keygate keeps only its hash"
	noteReplayed = "this is a replay of an earlier request with the same Idempotency-Key: the key was shown once, in the first response, and cannot be shown again; no new key was issued"
)

// detail is the detail of rec, the record a change returned (it is not
// read again).
func (a *API) detail(r *request, rec keystore.Record) keyops.KeyDetail {
	d, err := a.deps.Ops.DescribeKey(r.Context(), rec)
	if err != nil {
		return keyops.KeyDetail{RecordView: rec.View(a.now())}
	}
	return d
}

func (a *API) issuedResponse(r *request, key string, rec keystore.Record) response {
	d := a.detail(r, rec)
	return response{
		status:   http.StatusCreated,
		body:     issued{Key: key, Note: noteShown, KeyDetail: d},
		replay:   issued{Note: noteReplayed, KeyDetail: d},
		location: "/v1/keys/" + rec.ID,
	}
}

func (a *API) issueKey(r *request) (response, error) {
	var b keyCreateBody
	if err := r.decode(&b); err != nil {
		return response{}, err
	}
	req := keystore.IssueRequest{Product: b.Product, Env: b.Env, Context: b.Context, Name: b.Name, Consumer: b.Consumer,
		Permissions: b.Permissions, AllowedCIDRs: b.AllowedCIDRs}
	if b.ExpiresIn != "" {
		d, err := time.ParseDuration(b.ExpiresIn)
		if err != nil || d <= 0 {
			return response{}, badRequest("expires_in: want a positive duration such as 720h, or leave it out")
		}
		req.ExpiresIn = d
	}
	key, rec, err := a.deps.Ops.IssueKey(r.Context(), r.actor(), req)
	if err != nil {
		return response{}, err
	}
	return a.issuedResponse(r, key, rec), nil
}

func (a *API) listKeys(r *request) (response, error) {
	q := r.URL.Query()
	limit, after, err := parsePage(q)
	if err != nil {
		return response{}, err
	}
	f := keyops.KeyFilter{Consumer: q.Get("consumer"), Product: keystore.Product(q.Get("product")), Env: keystore.Env(q.Get("env")), Status: keystore.Status(q.Get("status"))}
	if f.Product != "" && !f.Product.Valid() {
		return response{}, badRequest("product: must be extraction or registry")
	}
	if f.Env != "" && !f.Env.Valid() {
		return response{}, badRequest("env: must be live or test")
	}
	switch f.Status {
	case "", keystore.Active, keystore.Revoked, keystore.Expired:
	default:
		return response{}, badRequest("status: must be active, revoked or expired")
	}
	p, err := a.deps.Ops.ListKeysPage(r.Context(), f, after.position(), limit)
	if err != nil {
		return response{}, err
	}
	now := a.now()
	views := make([]keystore.RecordView, len(p.Keys))
	for i, rec := range p.Keys {
		views[i] = rec.View(now)
	}
	return response{status: http.StatusOK, body: pageOf(views, p.Next)}, nil
}

func (a *API) getKey(r *request) (response, error) {
	d, err := a.deps.Ops.ShowKey(r.Context(), r.PathValue("id"))
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: d}, nil
}

func (a *API) updateKey(r *request) (response, error) {
	m, err := r.patchFields("name", "expires_at", "plan", "override", "permissions", "allowed_cidrs")
	if err != nil {
		return response{}, err
	}
	var u keyops.KeyUpdate
	if _, ok := m["name"]; ok {
		u.Name = new(string)
		if err := field(m, "name", u.Name); err != nil {
			return response{}, err
		}
	}
	if raw, ok := m["expires_at"]; ok {
		u.ExpiresAt = new(time.Time)
		if !isNull(raw) {
			if err := field(m, "expires_at", u.ExpiresAt); err != nil {
				return response{}, err
			}
		}
	}
	if err := limitPatch(m, &u.Limits); err != nil {
		return response{}, err
	}
	if err := accessPatch(m, &u.Access); err != nil {
		return response{}, err
	}
	rec, err := a.deps.Ops.UpdateKey(r.Context(), r.actor(), r.PathValue("id"), u)
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: a.detail(r, rec)}, nil
}

type rotateBody struct {
	// Grace is how long the old key keeps working, such as 24h; "" or
	// "0s" revokes it at once.
	Grace string `json:"grace"`
}

func (a *API) rotateKey(r *request) (response, error) {
	var b rotateBody
	if len(strings.TrimSpace(string(r.body))) > 0 {
		if err := r.decode(&b); err != nil {
			return response{}, err
		}
	}
	var grace time.Duration
	if b.Grace != "" {
		var err error
		if grace, err = time.ParseDuration(b.Grace); err != nil {
			return response{}, badRequest("grace: want a duration such as 24h")
		}
	}
	key, rec, err := a.deps.Ops.RotateKey(r.Context(), r.actor(), r.PathValue("id"), grace)
	if err != nil {
		return response{}, err
	}
	return a.issuedResponse(r, key, rec), nil
}

// purgeBody asks to delete the keys that ended long ago.
type purgeBody struct {
	// OlderThan: keys revoked or expired more than this long ago, as a
	// duration such as 2160h or a number of days such as 90d. Required.
	OlderThan string `json:"older_than"`
	// Limit bounds the keys of one call (1 to 100000, default 10000); the
	// answer's "more" says whether to call again.
	Limit *int `json:"limit"`
	// DryRun lists the keys and deletes nothing.
	DryRun bool `json:"dry_run"`
}

// purgedKey is a purged key as the answer names it.
type purgedKey struct {
	ID      string    `json:"id"`
	Status  string    `json:"status"`
	EndedAt time.Time `json:"ended_at"`
}

const (
	// A call reads the key set once (4 s at 1.1M keys), so a call should
	// purge many: the answer lists each key (about 80 bytes).
	defaultPurgeLimit = 10000
	maxPurgeLimit     = 100000
)

func (a *API) purgeKeys(r *request) (response, error) {
	var b purgeBody
	if err := r.decode(&b); err != nil {
		return response{}, err
	}
	d, ok := keyops.ParseAge(b.OlderThan)
	if !ok {
		return response{}, badRequest("older_than: want a duration such as 2160h or a number of days such as 90d")
	}
	limit := defaultPurgeLimit
	if b.Limit != nil {
		if limit = *b.Limit; limit < 1 || limit > maxPurgeLimit {
			return response{}, badRequest("limit: must be a whole number from 1 to 100000")
		}
	}
	now := a.now()
	out := struct {
		Purged []purgedKey `json:"purged"`
		More   bool        `json:"more"`
		DryRun bool        `json:"dry_run"`
	}{Purged: []purgedKey{}, DryRun: b.DryRun}
	more, err := a.deps.Ops.PurgeKeys(r.Context(), r.actor(), keyops.PurgeRequest{OlderThan: d, Limit: limit, DryRun: b.DryRun}, func(recs []keystore.Record) error {
		for _, rec := range recs {
			ended, _ := rec.EndedAt(now)
			out.Purged = append(out.Purged, purgedKey{rec.ID, string(rec.StateAt(now)), ended.UTC()})
		}
		return nil
	})
	if err != nil {
		return response{}, err
	}
	out.More = more
	return response{status: http.StatusOK, body: out}, nil
}

func (a *API) revokeKey(r *request) (response, error) {
	if len(strings.TrimSpace(string(r.body))) > 0 && strings.TrimSpace(string(r.body)) != "{}" {
		return response{}, badRequest("revoke takes no body")
	}
	rec, err := a.deps.Ops.RevokeKey(r.Context(), r.actor(), r.PathValue("id"))
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: a.detail(r, rec)}, nil
}

// ---- usage and audit ----

var errNotConfigured = &apiError{status: http.StatusNotImplemented, slug: "not-configured", title: "not available on this gateway", detail: ""}

func notConfigured(what string) error {
	e := *errNotConfigured
	e.detail = what + " is not configured on this gateway"
	return &e
}

func (a *API) keyUsage(r *request) (response, error) {
	if a.deps.Usage == nil {
		return response{}, notConfigured("usage counting")
	}
	var since time.Duration
	if s := r.URL.Query().Get("since"); s != "" {
		var err error
		if since, err = time.ParseDuration(s); err != nil || since <= 0 {
			return response{}, badRequest("since: want a positive duration such as 24h")
		}
	}
	id := r.PathValue("id")
	if _, err := a.deps.Ops.GetKey(r.Context(), id); err != nil {
		return response{}, err
	}
	u, err := a.deps.Usage.KeyUsage(r.Context(), id, since)
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: u}, nil
}

// migration is GET /v1/migration[?since=720h][&consumer=ID]: per consumer and key, the
// requests with the key against those with a token, and who has moved.
func (a *API) migration(r *request) (response, error) {
	mr, ok := a.deps.Usage.(MigrationReader)
	if !ok {
		return response{}, notConfigured("usage counting")
	}
	since := 30 * 24 * time.Hour
	if s := r.URL.Query().Get("since"); s != "" {
		var err error
		if since, err = time.ParseDuration(s); err != nil || since <= 0 || since > 30*24*time.Hour {
			return response{}, badRequest("since: want a positive duration of at most 720h (30 days), such as 168h")
		}
	}
	m, err := mr.Migration(r.Context(), since, r.URL.Query().Get("consumer"))
	if err != nil {
		return response{}, err
	}
	return response{status: http.StatusOK, body: m}, nil
}

func (a *API) auditEvents(r *request) (response, error) {
	if a.deps.Audit == nil {
		return response{}, notConfigured("the audit log")
	}
	q := r.URL.Query()
	aq := AuditQuery{Target: q.Get("target"), Actor: q.Get("actor"), Cursor: q.Get("cursor"), Limit: defaultLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return response{}, badRequest("limit: must be a whole number from 1 to 1000")
		}
		aq.Limit = n
	}
	if s := q.Get("since"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			aq.Since = a.now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, s); err == nil {
			aq.Since = t
		} else {
			return response{}, badRequest("since: want a duration such as 24h or an RFC 3339 time")
		}
	}
	page, err := a.deps.Audit.ReadAudit(r.Context(), aq)
	if err != nil {
		return response{}, err
	}
	items := page.Items
	if items == nil {
		items = []any{}
	}
	return response{status: http.StatusOK, body: struct {
		Items      any    `json:"items"`
		NextCursor string `json:"next_cursor,omitempty"`
	}{items, page.NextCursor}}, nil
}

// portalSessionBody is the body of POST /v1/portal-sessions.
type portalSessionBody struct {
	Consumer string `json:"consumer"`
	// Subject names the user in the operator's own dashboard, for the
	// audit log; optional.
	Subject string `json:"subject"`
}

// portalSession is its answer. URL is a bearer secret: it is left out of
// a replay.
type portalSession struct {
	URL       string    `json:"url,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	Consumer  string    `json:"consumer"`
	Note      string    `json:"note"`
}

const (
	noteLinkShown    = "send the user's browser to url: it starts a portal session for the consumer, works once, and expires at expires_at"
	noteLinkReplayed = "this is a replay of an earlier request with the same Idempotency-Key: the url was returned once, in the first response, and is not returned again; no new link was made"
)

func (a *API) createPortalSession(r *request) (response, error) {
	if a.deps.Portal == nil {
		return response{}, notConfigured("the self-service portal")
	}
	var b portalSessionBody
	if err := r.decode(&b); err != nil {
		return response{}, err
	}
	if b.Consumer == "" {
		return response{}, badRequest("consumer: required, the id of the consumer the session is for")
	}
	if err := keyops.CheckText("subject", b.Subject); err != nil {
		return response{}, err
	}
	url, exp, err := a.deps.Portal.SessionLink(r.Context(), r.actor(), b.Consumer, b.Subject)
	if err != nil {
		return response{}, err
	}
	exp = exp.UTC()
	return response{
		status: http.StatusCreated,
		body:   portalSession{URL: url, ExpiresAt: exp, Consumer: b.Consumer, Note: noteLinkShown},
		replay: portalSession{ExpiresAt: exp, Consumer: b.Consumer, Note: noteLinkReplayed},
	}, nil
}
