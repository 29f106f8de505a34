package ui

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// Charts are SVG drawn here, small enough to send again with every
// update of their section; their colours are the stylesheet's (classes),
// so that the page's Content-Security-Policy needs no inline styles.

// sparkline draws points between from and to as a line over its area,
// w×h pixels, from 0 to top (at least the largest value; 0: the largest
// value, or 1 if all are 0), titled with title (a tooltip).
func sparkline(points []point, from, to time.Time, top float64, w, h int, title string) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" width="%d" height="%d" viewBox="0 0 %d %d" role="img"><title>%s</title>`,
		w, h, w, h, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line class="axis" x1="0" y1="%d" x2="%d" y2="%d"/>`, h-1, w, h-1)
	for _, p := range points {
		top = max(top, p.v)
	}
	if top <= 0 {
		top = 1
	}
	span := to.Sub(from).Seconds()
	if len(points) > 0 && span > 0 {
		xy := func(p point) (float64, float64) {
			x := min(max(p.at.Sub(from).Seconds()/span, 0), 1) * float64(w-2)
			return 1 + x, float64(h-2) - p.v/top*float64(h-4)
		}
		var line strings.Builder
		for _, p := range points {
			x, y := xy(p)
			fmt.Fprintf(&line, "%.1f,%.1f ", x, y)
		}
		x0, _ := xy(points[0])
		xn, yn := xy(points[len(points)-1])
		fmt.Fprintf(&b, `<polygon class="area" points="%.1f,%d %s%.1f,%d"/>`, x0, h-1, line.String(), xn, h-1)
		fmt.Fprintf(&b, `<polyline class="line" points="%s"/>`, strings.TrimSpace(line.String()))
		fmt.Fprintf(&b, `<circle class="dot" cx="%.1f" cy="%.1f" r="2"/>`, xn, yn)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// part is one part of a stacked bar: a count and the class that colours
// it.
type part struct {
	Label, Class string
	Count        int
}

// stackedBar draws parts side by side in proportion, h pixels high and
// as wide as its box (w in its own units), each titled with its label
// and count.
func stackedBar(parts []part, w, h int) template.HTML {
	total := 0
	for _, p := range parts {
		total += p.Count
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="stack" width="100%%" height="%d" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img">`, h, w, h)
	fmt.Fprintf(&b, `<rect class="empty" x="0" y="0" width="%d" height="%d"/>`, w, h)
	x := 0.0
	for _, p := range parts {
		if p.Count == 0 || total == 0 {
			continue
		}
		pw := float64(p.Count) / float64(total) * float64(w)
		fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="0" width="%.1f" height="%d"><title>%s: %d</title></rect>`,
			template.HTMLEscapeString(p.Class), x, pw, h, template.HTMLEscapeString(p.Label), p.Count)
		x += pw
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// usageBar draws used of capacity as a filled bar, h pixels high and as
// wide as its box (w in its own units); over capacity it is full and
// marked over.
func usageBar(used, capacity int64, w, h int) template.HTML {
	frac := 0.0
	if capacity > 0 {
		frac = float64(used) / float64(capacity)
	}
	class := "used"
	if frac > 1 {
		class, frac = "used over", 1
	}
	return template.HTML(fmt.Sprintf(`<svg class="usage" width="100%%" height="%d" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img">`+
		`<rect class="empty" x="0" y="0" width="%d" height="%d"/><rect class="%s" x="0" y="0" width="%.1f" height="%d"/></svg>`,
		h, w, h, w, h, class, frac*float64(w), h))
}
