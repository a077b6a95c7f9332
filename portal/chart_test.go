package portal

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/usage"
)

// svgSummary is what the tests read back from a chart.
type svgSummary struct {
	root       string            // root element
	attrs      map[string]string // the root's attributes
	title      string            // the root's <title>
	desc       string            // the root's <desc>
	hours      int               // <g class="chart-hour">
	hourTitles []string          // their <title>s
	xLabels    []string          // texts under the x axis
	yLabels    []string          // texts of the y axis
	texts      []string          // all <text> contents
	styled     []string          // style attributes and elements found
}

// parseSVG parses the chart as XML, failing the test if it is not, and
// summarises it.
func parseSVG(t testing.TB, svg string) svgSummary {
	t.Helper()
	s, err := summarize(svg)
	if err != nil {
		t.Fatalf("not XML: %v\n%s", err, svg)
	}
	return s
}

func summarize(svg string) (svgSummary, error) {
	s := svgSummary{attrs: map[string]string{}}
	d := xml.NewDecoder(strings.NewReader(svg))
	var stack []string // classes of the open elements
	var text *string
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			class := ""
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					class = a.Value
				}
				if strings.EqualFold(a.Name.Local, "style") {
					s.styled = append(s.styled, "attribute on "+tok.Name.Local)
				}
				if depth == 0 {
					s.attrs[a.Name.Local] = a.Value
				}
			}
			if depth == 0 {
				s.root = tok.Name.Local
			}
			if strings.EqualFold(tok.Name.Local, "style") {
				s.styled = append(s.styled, "element")
			}
			parent := ""
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			switch {
			case class == "chart-hour":
				s.hours++
			case tok.Name.Local == "title" && depth == 1:
				text = &s.title
			case tok.Name.Local == "desc" && depth == 1:
				text = &s.desc
			case tok.Name.Local == "title" && parent == "chart-hour":
				s.hourTitles = append(s.hourTitles, "")
				text = &s.hourTitles[len(s.hourTitles)-1]
			case tok.Name.Local == "text":
				s.texts = append(s.texts, "")
				text = &s.texts[len(s.texts)-1]
			}
			stack = append(stack, class)
			depth++
		case xml.EndElement:
			if tok.Name.Local == "text" && text != nil {
				switch stack[len(stack)-2] {
				case "chart-x":
					s.xLabels = append(s.xLabels, *text)
				case "chart-y":
					s.yLabels = append(s.yLabels, *text)
				}
			}
			text = nil
			stack = stack[:len(stack)-1]
			depth--
		case xml.CharData:
			if text != nil {
				*text += string(tok)
			}
		}
	}
	return s, nil
}

// series returns n hours ending with the one of now, counted by f.
func series(now time.Time, n int, f func(i int) usage.Counts) []usage.Hour {
	hs := make([]usage.Hour, n)
	first := now.UTC().Truncate(time.Hour).Add(-time.Duration(n-1) * time.Hour)
	for i := range hs {
		hs[i] = usage.Hour{Start: first.Add(time.Duration(i) * time.Hour), Counts: f(i)}
	}
	return hs
}

func TestUsageChart(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC)
	zero := func(int) usage.Counts { return usage.Counts{} }
	cases := []struct {
		name     string
		title    string
		hours    []usage.Hour
		bars     int
		label    []string // in the aria-label
		xLabels  []string
		yLabels  []string
		tooltips map[int]string // hour -> its <title>
		empty    bool
	}{
		{
			name: "no hours at all", title: "Last 24 hours", empty: true,
			label: []string{"Last 24 hours: no requests in this period"},
		},
		{
			name: "24 hours without requests", title: "Last 24 hours", hours: series(now, 24, zero), empty: true,
			label:   []string{"no requests in this period (22 Nov 11:00 to 23 Nov 11:00 UTC)"},
			xLabels: []string{"12:00", "18:00", "00:00", "06:00"},
		},
		{
			name: "one hour", title: "This hour", hours: series(now, 1, func(int) usage.Counts { return usage.Counts{Admitted: 3, Rate: 1} }),
			bars:     1,
			label:    []string{"This hour: 3 requests admitted and 1 refused, 23 Nov 10:00 to 23 Nov 11:00 UTC"},
			xLabels:  []string{"10:00"},
			yLabels:  []string{"0", "1", "2", "3", "4"},
			tooltips: map[int]string{0: "Mon 23 Nov 10:00–11:00 UTC (so far): 3 admitted, 1 refused (rate 1)"},
		},
		{
			name: "24 hours", title: "Last 24 hours",
			hours: series(now, 24, func(i int) usage.Counts {
				if i%5 == 0 {
					return usage.Counts{}
				}
				return usage.Counts{Admitted: int64(10 * i), Quota: int64(i % 3), Concurrency: int64(i % 2)}
			}),
			bars:    24,
			label:   []string{"Last 24 hours: 2,260 requests admitted and 29 refused, 22 Nov 11:00 to 23 Nov 11:00 UTC"},
			xLabels: []string{"12:00", "18:00", "00:00", "06:00"},
			yLabels: []string{"0", "100", "200", "300"},
			tooltips: map[int]string{
				0:  "Sun 22 Nov 11:00–12:00 UTC: 0 admitted, 0 refused",
				1:  "Sun 22 Nov 12:00–13:00 UTC: 10 admitted, 2 refused (quota 1, concurrency 1)",
				22: "Mon 23 Nov 09:00–10:00 UTC: 220 admitted, 1 refused (quota 1)",
				23: "Mon 23 Nov 10:00–11:00 UTC (so far): 230 admitted, 3 refused (quota 2, concurrency 1)",
			},
		},
		{
			name: "7 days, large numbers", title: "Last 7 days",
			hours: series(now, 168, func(i int) usage.Counts {
				return usage.Counts{Admitted: 1_000_000_000 + int64(i)*10_000_000, Rate: 123_456_789, Context: int64(i), BytesIn: 1 << 40}
			}),
			bars: 168,
			label: []string{"Last 7 days: " + fmtInt(168*1_000_000_000+10_000_000*167*168/2) + " requests admitted and " +
				fmtInt(168*123_456_789+167*168/2) + " refused, 16 Nov 11:00 to 23 Nov 11:00 UTC"},
			xLabels: []string{"Mon 16 Nov", "Tue 17 Nov", "Wed 18 Nov", "Thu 19 Nov", "Fri 20 Nov", "Sat 21 Nov", "Sun 22 Nov"},
			yLabels: []string{"0", "1B", "2B", "3B"},
			tooltips: map[int]string{
				167: "Mon 23 Nov 10:00–11:00 UTC (so far): 2,670,000,000 admitted, 123,456,956 refused (rate 123,456,789, context 167)",
			},
		},
		{
			name: "text is escaped", title: `Acme <script>alert("x")</script> & 'co'`,
			hours: series(now, 2, func(int) usage.Counts { return usage.Counts{Product: 1} }),
			bars:  2,
			label: []string{`Acme <script>alert("x")</script> & 'co': 0 requests admitted and 2 refused`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := string(usageChart(tc.title, tc.hours, now))
			if again := string(usageChart(tc.title, tc.hours, now)); again != out {
				t.Fatal("two renderings differ")
			}
			s := parseSVG(t, out)
			if s.root != "svg" || s.attrs["role"] != "img" {
				t.Errorf("root <%s role=%q>, want <svg role=img>", s.root, s.attrs["role"])
			}
			if len(s.styled) > 0 {
				t.Errorf("styles (forbidden by the CSP): %v", s.styled)
			}
			if s.title != tc.title || s.desc == "" {
				t.Errorf("title %q, desc %q", s.title, s.desc)
			}
			for _, want := range tc.label {
				if !strings.Contains(s.attrs["aria-label"], want) {
					t.Errorf("aria-label %q\nwant it to contain %q", s.attrs["aria-label"], want)
				}
			}
			if s.hours != tc.bars || len(s.hourTitles) != tc.bars {
				t.Errorf("%d bars with %d titles, want %d", s.hours, len(s.hourTitles), tc.bars)
			}
			if tc.xLabels != nil && fmt.Sprint(s.xLabels) != fmt.Sprint(tc.xLabels) {
				t.Errorf("x labels %q, want %q", s.xLabels, tc.xLabels)
			}
			if tc.yLabels != nil && fmt.Sprint(s.yLabels) != fmt.Sprint(tc.yLabels) {
				t.Errorf("y labels %q, want %q", s.yLabels, tc.yLabels)
			}
			for i, want := range tc.tooltips {
				if s.hourTitles[i] != want {
					t.Errorf("hour %d: %q, want %q", i, s.hourTitles[i], want)
				}
			}
			saysEmpty := strings.Contains(strings.Join(s.texts, "|"), noRequests)
			if saysEmpty != tc.empty {
				t.Errorf("says %q: %v, want %v; texts %q", noRequests, saysEmpty, tc.empty, s.texts)
			}
			if strings.Contains(out, "<script") {
				t.Error("unescaped markup in the output")
			}
		})
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ peak, step, top int64 }{
		{1, 1, 1}, {3, 1, 3}, {4, 1, 4}, {5, 2, 6}, {7, 2, 8}, {9, 5, 10}, {20, 5, 20}, {21, 10, 30},
		{233, 100, 300}, {999, 500, 1000}, {2_670_000_000, 1_000_000_000, 3_000_000_000},
	} {
		step, top := niceScale(tc.peak)
		if step != tc.step || top != tc.top || top < tc.peak || top/step > 4 {
			t.Errorf("niceScale(%d) = %d, %d; want %d, %d", tc.peak, step, top, tc.step, tc.top)
		}
	}
}

func TestFormats(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := fmtInt(n); got != want {
			t.Errorf("fmtInt(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 500: "500", 2500: "2.5k", 1_000_000: "1M", 1_500_000: "1.5M", 3_000_000_000: "3B"} {
		if got := fmtCompact(n); got != want {
			t.Errorf("fmtCompact(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestWriteSampleCharts writes a 24-hour, a 7-day and an empty chart
// as files, to the directory in KEYGATE_CHART_SAMPLES when set (to look
// at), else a temp dir.
func TestWriteSampleCharts(t *testing.T) {
	dir := os.Getenv("KEYGATE_CHART_SAMPLES")
	if dir == "" {
		dir = t.TempDir()
	}
	now := time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC)
	wave := func(i int) usage.Counts {
		a := int64(400 + 300*((i*7)%11) + 50*(i%24))
		return usage.Counts{Admitted: a, Rate: a / 20 * int64(i%3), Quota: int64(i % 7 * 9)}
	}
	for name, c := range map[string]string{
		"chart-24h.svg": string(usageChart("Last 24 hours", series(now, 24, wave), now)),
		"chart-7d.svg":  string(usageChart("Last 7 days", series(now, 168, wave), now)),
		"chart-0.svg":   string(usageChart("Last 24 hours", series(now, 24, func(int) usage.Counts { return usage.Counts{} }), now)),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func Example_usageChart() {
	now := time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC)
	hours := []usage.Hour{
		{Start: time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC), Counts: usage.Counts{Admitted: 1200, Rate: 30}},
		{Start: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)},
		{Start: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), Counts: usage.Counts{Admitted: 45, Quota: 5}},
	}
	svg := usageChart("Last 3 hours", hours, now)

	s, err := summarize(string(svg))
	if err != nil {
		fmt.Println(err)
	}
	fmt.Println(s.attrs["aria-label"])
	fmt.Println(s.desc)
	for _, h := range s.hourTitles {
		fmt.Println(h)
	}
	fmt.Println("y axis:", s.yLabels, "x axis:", s.xLabels)
	// Output:
	// Last 3 hours: 1,245 requests admitted and 35 refused, 23 Nov 08:00 to 23 Nov 11:00 UTC
	// Stacked bars of the admitted and refused requests per hour, 23 Nov 08:00 to 23 Nov 11:00 UTC. In total 1,245 admitted and 35 refused (rate 30, quota 5). Busiest hour: Mon 23 Nov 08:00 UTC, with 1,230 requests.
	// Mon 23 Nov 08:00–09:00 UTC: 1,200 admitted, 30 refused (rate 30)
	// Mon 23 Nov 09:00–10:00 UTC: 0 admitted, 0 refused
	// Mon 23 Nov 10:00–11:00 UTC (so far): 45 admitted, 5 refused (quota 5)
	// y axis: [0 500 1k 1.5k] x axis: [08:00 09:00 10:00]
}
