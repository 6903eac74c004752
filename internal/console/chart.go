package console

import (
	"fmt"
	"html"
	"html/template"
	"sort"
	"strings"
	"time"
)

func timeHour(i int) time.Duration { return time.Duration(i) * time.Hour }

// chartSVG draws messages per hour, one panel per protocol, each bar
// stacked by outcome, each panel on its own scale (its axis says so). Only
// numbers, fixed words and protocol names (from the audit, escaped) go
// into the markup.
func chartSVG(h hourly) template.HTML {
	protos := make([]string, 0, len(h.Counts))
	for p := range h.Counts {
		protos = append(protos, p)
	}
	sort.Strings(protos)
	if len(protos) == 0 {
		protos = []string{"as2", "as4"}
	}
	const (
		width, panelH, left, top, barW, gap = 760, 150, 40, 20, 26, 4
	)
	height := len(protos)*(panelH+top+30) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="messages per hour over the last 24 hours by protocol and outcome">`,
		width, height, width, height)
	for pi, p := range protos {
		y0 := pi*(panelH+top+30) + top
		scale := max(h.Max[p], 1)
		fmt.Fprintf(&b, `<g class="proto" data-protocol="%s" data-scale="%d">`, html.EscapeString(p), scale)
		fmt.Fprintf(&b, `<text x="0" y="%d" class="panel">%s (own scale: 0 to %d per hour)</text>`, y0-6, html.EscapeString(strings.ToUpper(p)), scale)
		// axis and grid: 0, half, max
		for _, f := range []int{0, 1, 2} {
			v := scale * f / 2
			y := y0 + panelH - panelH*f/2
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="grid"/><text x="%d" y="%d" class="tick" text-anchor="end">%d</text>`,
				left, y, width, y, left-4, y+4, v)
		}
		for i := range 24 {
			x := left + 4 + i*(barW+gap)
			y := y0 + panelH
			for _, o := range outcomes {
				n := 0
				if c := h.Counts[p][o]; c != nil {
					n = c[i]
				}
				if n == 0 {
					continue
				}
				bh := panelH * n / scale
				if bh < 1 {
					bh = 1
				}
				y -= bh
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s %02d:00 %s: %d</title></rect>`,
					x, y, barW, bh, outcomeColor[o], html.EscapeString(p), h.Start.Add(timeHour(i)).UTC().Hour(), o, n)
			}
			if i%3 == 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" class="tick">%02d</text>`, x, y0+panelH+14, h.Start.Add(timeHour(i)).UTC().Hour())
			}
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
