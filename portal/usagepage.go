package portal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/usage"
)

// limitRow is one key's limits as the usage page shows them.
type limitRow struct {
	ID, Name  string
	Rate      string
	Burst     int
	Quota     string
	Remaining string
}

// usagePage shows admitted and refused requests over 24 hours and 7 days
// (all the consumer's keys, or one of them), as server-rendered SVG
// charts, beside each active key's limits and quota left.
func (p *Portal) usagePage(w http.ResponseWriter, r *http.Request, sess *Session) {
	ctx := r.Context()
	recs, err := p.ops.ListKeys(ctx, keyops.KeyFilter{Consumer: sess.Consumer})
	if err != nil {
		p.storeError(w, r, sess, err)
		return
	}
	sel := r.URL.Query().Get("key")
	var shown []keystore.Record
	for _, rec := range recs {
		if sel == "" || rec.ID == sel {
			shown = append(shown, rec)
		}
	}
	if sel != "" && len(shown) == 0 {
		p.errorPage(w, r, sess, http.StatusNotFound, "Key not found", "You have no key with this id.")
		return
	}
	now := p.now()
	data := map[string]any{"Keys": recs, "Selected": sel}
	// One read of the 7 days (hourly, the current hour last); the last 24
	// hours are its tail.
	week, err := p.series(ctx, sess.Consumer, sel, 7*24*time.Hour)
	if errors.Is(err, keyops.ErrNoUsage) {
		data["Note"] = "Usage is not recorded on this gateway."
	} else if err != nil {
		p.log.Warn("portal: usage unavailable", zap.Error(err))
		data["Note"] = "Usage cannot be read right now."
	}
	day := week[max(0, len(week)-24):]
	for _, period := range []struct {
		name  string
		hours []usage.Hour
		title string
	}{{"Day", day, "Requests per hour, last 24 hours"}, {"Week", week, "Requests per hour, last 7 days"}} {
		var total usage.Counts
		for _, h := range period.hours {
			total.Add(h.Counts)
		}
		data[period.name] = total
		data[period.name+"Refused"] = total.Refused()
		data[period.name+"Chart"] = usageChart(period.title, period.hours, now)
	}
	var limits []limitRow
	for _, rec := range shown {
		if rec.View(now).Status != keystore.Active {
			continue
		}
		limits = append(limits, p.limitOf(ctx, rec))
	}
	data["Limits"] = limits
	p.render(w, r, http.StatusOK, "usage", sess, data)
}

// series is the hourly usage of one key of the consumer, or of all its
// keys.
func (p *Portal) series(ctx context.Context, consumer, key string, since time.Duration) ([]usage.Hour, error) {
	if key != "" {
		return p.ops.KeyUsageSeries(ctx, key, since)
	}
	return p.ops.ConsumerUsageSeries(ctx, consumer, since)
}

// limitOf is a key's effective limit and the quota it has left.
func (p *Portal) limitOf(ctx context.Context, rec keystore.Record) limitRow {
	row := limitRow{ID: rec.ID, Name: rec.Name, Rate: "unknown", Quota: "unknown", Remaining: "unknown"}
	d, err := p.ops.ShowKey(ctx, rec.ID)
	if err != nil || d.Limit == nil {
		return row
	}
	l := d.Limit
	row.Rate = strconv.FormatFloat(l.Rate, 'f', -1, 64) + " per " + l.Per
	row.Burst = l.Burst
	row.Quota = l.Quota
	if l.Scope == "consumer" {
		row.Quota += " (shared by all your keys)"
	}
	row.Remaining = "no quota"
	if l.Quota != "none" {
		row.Remaining = "not known here"
		if u, err := p.ops.KeyUsage(ctx, rec.ID, time.Hour); err == nil && u.QuotaNow != nil && u.QuotaNow.Remaining != nil {
			row.Remaining = fmt.Sprintf("%d (renews in %s)", *u.QuotaNow.Remaining, u.QuotaNow.ResetsIn)
		}
	}
	return row
}
