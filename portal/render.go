package portal

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// page is what every template gets.
type page struct {
	Title   string
	Session *Session
	// Nav is the current section, for the navigation bar.
	Nav  string
	Data map[string]any
	// Banner announces the end of API keys; nil for none.
	Banner *banner
}

// banner is the deprecation banner: when API keys stop working, and how
// to exchange the customer's own key for a token.
type banner struct {
	Sunset   string
	Link     string
	TokenURL string
	// KeyID is one of the customer's active keys, for the exchange
	// command; "" before sign-in or without one.
	KeyID string
}

// banner builds the deprecation banner for sess, or nil when API keys
// are not being retired.
func (p *Portal) banner(r *http.Request, sess *Session) *banner {
	if p.sunset.IsZero() {
		return nil
	}
	b := &banner{Sunset: p.sunset.UTC().Format("2 January 2006"), Link: p.depLink, TokenURL: p.tokenURL}
	if sess != nil {
		if recs, err := p.ops.ListKeys(r.Context(), keyops.KeyFilter{Consumer: sess.Consumer, Status: keystore.Active}); err == nil && len(recs) > 0 {
			b.KeyID = recs[len(recs)-1].ID
		}
	}
	return b
}

var funcs = template.FuncMap{
	"when":  when,
	"upper": strings.ToUpper,
}

// when is a time for a page: "YYYY-MM-DD hh:mm UTC", or "never".
func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "never"
		}
		return v.UTC().Format("2006-01-02 15:04 UTC")
	case *time.Time:
		if v == nil || v.IsZero() {
			return "never"
		}
		return v.UTC().Format("2006-01-02 15:04 UTC")
	}
	return fmt.Sprint(t)
}

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// titles are the pages' titles.
var titles = map[string]string{
	"signin": "Sign in", "noconsumer": "No account", "keys": "Your keys", "newkey": "Create a key",
	"keyshown": "Your new key", "rotate": "Rotate a key", "revoke": "Revoke a key", "usage": "Usage and limits",
	"limitrequest": "Request a higher limit", "error": "Error", "delegated": "Sign in",
	"permissions": "Narrow a key",
}

var navs = map[string]string{
	"keys": "keys", "newkey": "new", "keyshown": "keys", "rotate": "keys", "revoke": "keys",
	"usage": "usage", "limitrequest": "limits", "permissions": "keys",
}

// render writes a page. It renders into a buffer first, so that a
// template error is a clean 500 page rather than half a page.
func (p *Portal) render(w http.ResponseWriter, r *http.Request, status int, name string, sess *Session, data map[string]any) {
	var buf bytes.Buffer
	title := titles[name]
	if t, ok := data["Title"].(string); ok {
		title = t
	}
	err := p.pages[name].ExecuteTemplate(&buf, "layout.html", page{Title: title, Session: sess, Nav: navs[name], Data: data, Banner: p.banner(r, sess)})
	if err != nil {
		p.log.Error("portal: template", zap.String("page", name), zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is a page that says what went wrong, in words for a person.
func (p *Portal) errorPage(w http.ResponseWriter, r *http.Request, sess *Session, status int, title, msg string) {
	p.render(w, r, status, "error", sess, map[string]any{"Title": title, "Message": msg})
}
