package portal

import (
	"encoding/xml"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/usage"
)

// The chart's geometry, in SVG user units (its viewBox); the portal's CSS
// may scale the whole chart (svg.usage-chart { max-width: 100%; height: auto }).
const (
	chartW      = 640
	chartH      = 240
	chartLeft   = 52 // room for the y-axis labels
	chartRight  = 12
	chartTop    = 40 // room for the title and the legend
	chartBottom = 30 // room for the x-axis labels
	plotW       = chartW - chartLeft - chartRight
	plotH       = chartH - chartTop - chartBottom
	plotBottom  = chartTop + plotH
)

// The colours are presentation attributes, not styles (the portal is
// served with Content-Security-Policy: default-src 'self', which forbids
// inline styles); the portal's CSS may override them through the classes
// chart-admitted, chart-refused, chart-grid, chart-axis, chart-text,
// chart-title and chart-empty. Blue and vermilion (Okabe-Ito) stay apart
// for colour-blind readers and contrast at least 3:1 with white.
const (
	colourAdmitted = "#0072b2"
	colourRefused  = "#d55e00"
	colourText     = "#333333"
	colourGrid     = "#e0e0e0"
	colourAxis     = "#767676"
)

// noRequests is what a chart of a period without requests says.
const noRequests = "No requests in this period"

// usageChart renders hours (as usage.Series returns them: one per hour,
// oldest first) as an inline SVG bar chart: per hour, admitted requests
// stacked under refused ones, with a legend, a y axis of round ticks and
// x-axis labels in UTC (every 6 hours up to 2 days, else per day). The
// root has role="img" and an aria-label with the totals; <title> and
// <desc> name and describe it, and each hour has a <title> with its
// counts (a tooltip without JavaScript). now marks the hour in progress
// as "so far". The output has no style attribute and no <style> element,
// escapes all text, and depends only on its arguments.
func usageChart(title string, hours []usage.Hour, now time.Time) template.HTML {
	var total usage.Counts
	var peak int64
	peakAt := -1
	for i, h := range hours {
		total.Add(h.Counts)
		if n := h.Admitted + h.Refused(); n > peak {
			peak, peakAt = n, i
		}
	}
	period := ""
	if len(hours) > 0 {
		period = fmtDayHour(hours[0].Start) + " to " + fmtDayHour(hours[len(hours)-1].Start.Add(time.Hour)) + " UTC"
	}

	var label, desc string
	if peak == 0 {
		label = title + ": no requests in this period"
		desc = noRequests
		if period != "" {
			label += " (" + period + ")"
			desc += ": " + period + "."
		}
	} else {
		label = title + ": " + fmtInt(total.Admitted) + " requests admitted and " + fmtInt(total.Refused()) + " refused, " + period
		desc = "Stacked bars of the admitted and refused requests per hour, " + period + ". In total " +
			fmtInt(total.Admitted) + " admitted and " + fmtInt(total.Refused()) + " refused" + fmtReasons(total) +
			". Busiest hour: " + fmtHour(hours[peakAt].Start) + " UTC, with " + fmtInt(peak) + " requests."
	}

	w := &svgWriter{}
	w.raw(`<svg xmlns="http://www.w3.org/2000/svg" class="usage-chart" role="img" aria-label="`)
	w.text(label)
	w.raw(`" viewBox="0 0 ` + itoa(chartW) + ` ` + itoa(chartH) + `" width="` + itoa(chartW) + `" height="` + itoa(chartH) +
		`" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="11">`)
	w.elem("title", title)
	w.elem("desc", desc)

	// Title and legend.
	w.raw(`<text class="chart-title" x="8" y="18" font-size="13" font-weight="bold" fill="` + colourText + `">`)
	w.text(title)
	w.raw(`</text>`)
	if peak > 0 {
		w.raw(`<g class="chart-legend" fill="` + colourText + `">`)
		lx := chartW - chartRight - 150
		w.raw(`<rect class="chart-admitted" x="` + itoa(lx) + `" y="9" width="10" height="10" fill="` + colourAdmitted + `"/>`)
		w.raw(`<text class="chart-text" x="` + itoa(lx+14) + `" y="18">Admitted</text>`)
		w.raw(`<rect class="chart-refused" x="` + itoa(lx+80) + `" y="9" width="10" height="10" fill="` + colourRefused + `"/>`)
		w.raw(`<text class="chart-text" x="` + itoa(lx+94) + `" y="18">Refused</text>`)
		w.raw(`</g>`)
	}

	// Y axis: grid lines at round ticks up to the busiest hour.
	var top int64 = 1
	if peak > 0 {
		var step int64
		step, top = niceScale(peak)
		w.raw(`<g class="chart-y" fill="` + colourText + `">`)
		for v := int64(0); v <= top; v += step {
			y := fmtF(plotBottom - float64(v)/float64(top)*plotH)
			if v > 0 {
				w.raw(`<line class="chart-grid" x1="` + itoa(chartLeft) + `" y1="` + y + `" x2="` + itoa(chartLeft+plotW) + `" y2="` + y + `" stroke="` + colourGrid + `"/>`)
			}
			w.raw(`<text class="chart-text" x="` + itoa(chartLeft-6) + `" y="` + y + `" dy="4" text-anchor="end">` + fmtCompact(v) + `</text>`)
		}
		w.raw(`</g>`)
	}

	// Bars: per hour a group with its tooltip, a transparent column that
	// shows the tooltip anywhere above the hour, and the stacked parts.
	if peak > 0 {
		slot := float64(plotW) / float64(len(hours))
		gap := math.Min(slot*0.2, 4)
		scale := plotH / float64(top)
		w.raw(`<g class="chart-bars">`)
		for i, h := range hours {
			x := chartLeft + float64(i)*slot
			w.raw(`<g class="chart-hour">`)
			w.elem("title", hourTitle(h, now))
			w.raw(`<rect class="chart-hit" x="` + fmtF(x) + `" y="` + itoa(chartTop) + `" width="` + fmtF(slot) + `" height="` + itoa(plotH) + `" fill="#000000" fill-opacity="0"/>`)
			bx, bw := fmtF(x+gap/2), fmtF(slot-gap)
			// A part that is not zero is at least 1 unit high, to be seen.
			var ah, rh float64
			if h.Admitted > 0 {
				ah = math.Max(float64(h.Admitted)*scale, 1)
				w.raw(`<rect class="chart-admitted" x="` + bx + `" y="` + fmtF(plotBottom-ah) + `" width="` + bw + `" height="` + fmtF(ah) + `" fill="` + colourAdmitted + `"/>`)
			}
			if r := h.Refused(); r > 0 {
				rh = math.Max(float64(h.Admitted+r)*scale-ah, 1)
				w.raw(`<rect class="chart-refused" x="` + bx + `" y="` + fmtF(plotBottom-ah-rh) + `" width="` + bw + `" height="` + fmtF(rh) + `" fill="` + colourRefused + `"/>`)
			}
			w.raw(`</g>`)
		}
		w.raw(`</g>`)
	} else {
		w.raw(`<text class="chart-empty" x="` + itoa(chartLeft+plotW/2) + `" y="` + itoa(chartTop+plotH/2) + `" text-anchor="middle" font-size="13" fill="` + colourText + `">` + noRequests + `</text>`)
	}

	// X axis: the base line, then ticks and labels in UTC.
	w.raw(`<g class="chart-x" fill="` + colourText + `">`)
	w.raw(`<line class="chart-axis" x1="` + itoa(chartLeft) + `" y1="` + itoa(plotBottom) + `" x2="` + itoa(chartLeft+plotW) + `" y2="` + itoa(plotBottom) + `" stroke="` + colourAxis + `"/>`)
	if len(hours) > 0 {
		xAxis(w, hours)
	}
	w.raw(`</g></svg>`)
	return template.HTML(w.String()) // every text went through w.text
}

// xAxis labels the hours: every hour up to 8 hours, every 6 hours up to 2
// days, else each day (under the middle of its hours, when it has at
// least 12 of them, with ticks at midnight).
func xAxis(w *svgWriter, hours []usage.Hour) {
	slot := float64(plotW) / float64(len(hours))
	tick := func(x float64) {
		w.raw(`<line class="chart-axis" x1="` + fmtF(x) + `" y1="` + itoa(plotBottom) + `" x2="` + fmtF(x) + `" y2="` + itoa(plotBottom+4) + `" stroke="` + colourAxis + `"/>`)
	}
	label := func(x float64, s string) {
		w.raw(`<text class="chart-text" x="` + fmtF(x) + `" y="` + itoa(plotBottom+16) + `" text-anchor="middle">`)
		w.text(s)
		w.raw(`</text>`)
	}
	if len(hours) <= 48 {
		every := 6
		if len(hours) <= 8 {
			every = 1
		}
		for i, h := range hours {
			if t := h.Start.UTC(); t.Hour()%every == 0 {
				x := chartLeft + float64(i)*slot
				tick(x)
				label(x, t.Format("15:04"))
			}
		}
		return
	}
	for i := 0; i < len(hours); {
		day := hours[i].Start.UTC()
		j := i + 1
		for j < len(hours) && sameDay(hours[j].Start.UTC(), day) {
			j++
		}
		if day.Hour() == 0 {
			tick(chartLeft + float64(i)*slot)
		}
		if j-i >= 12 {
			label(chartLeft+float64(i+j)/2*slot, day.Format("Mon 2 Jan"))
		}
		i = j
	}
}

func sameDay(a, b time.Time) bool {
	return a.Year() == b.Year() && a.YearDay() == b.YearDay()
}

// hourTitle is an hour's tooltip, such as
// "Mon 23 Nov 10:00–11:00 UTC: 1,234 admitted, 56 refused (rate 50, quota 6)".
func hourTitle(h usage.Hour, now time.Time) string {
	t := h.Start.UTC()
	s := t.Format("Mon 2 Jan 15:04") + "–" + t.Add(time.Hour).Format("15:04") + " UTC"
	if !now.Before(t) && now.Before(t.Add(time.Hour)) {
		s += " (so far)"
	}
	return s + ": " + fmtInt(h.Admitted) + " admitted, " + fmtInt(h.Refused()) + " refused" + fmtReasons(h.Counts)
}

// niceScale returns a round step (1, 2 or 5 times a power of ten) that
// divides the axis into at most 4 steps up to top >= peak > 0.
func niceScale(peak int64) (step, top int64) {
	for mag := int64(1); mag <= math.MaxInt64/10; mag *= 10 {
		for _, m := range [...]int64{1, 2, 5} {
			step = m * mag
			if step >= (peak+3)/4 {
				return step, (peak + step - 1) / step * step
			}
		}
	}
	return peak, peak
}

// fmtReasons lists the refusals by reason: " (rate 50, quota 6)", or ""
// when none were refused.
func fmtReasons(c usage.Counts) string {
	var parts []string
	for _, r := range [...]struct {
		name string
		n    int64
	}{{"rate", c.Rate}, {"quota", c.Quota}, {"context", c.Context}, {"product", c.Product}, {"concurrency", c.Concurrency}, {"forbidden", c.Forbidden()}} {
		if r.n > 0 {
			parts = append(parts, r.name+" "+fmtInt(r.n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func fmtDayHour(t time.Time) string { return t.UTC().Format("2 Jan 15:04") }
func fmtHour(t time.Time) string    { return t.UTC().Format("Mon 2 Jan 15:04") }

// fmtInt groups digits by thousands: 1234567 is "1,234,567".
func fmtInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtCompact shortens an axis tick: 2500 is "2.5k", 3000000 is "3M".
func fmtCompact(n int64) string {
	for _, u := range [...]struct {
		div    int64
		suffix string
	}{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}} {
		if n >= u.div {
			return strconv.FormatFloat(math.Round(float64(n)/float64(u.div)*10)/10, 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// fmtF formats a coordinate with at most 2 decimals.
func fmtF(f float64) string { return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64) }

func itoa(n int) string { return strconv.Itoa(n) }

// svgWriter builds the markup; raw is for the chart's own constant markup
// and numbers, text escapes everything else (for element content and
// attribute values alike).
type svgWriter struct{ strings.Builder }

func (w *svgWriter) raw(s string) { w.WriteString(s) }

func (w *svgWriter) text(s string) { _ = xml.EscapeText(w, []byte(s)) }

func (w *svgWriter) elem(name, text string) {
	w.raw("<" + name + ">")
	w.text(text)
	w.raw("</" + name + ">")
}
