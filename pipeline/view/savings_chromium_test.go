//go:build unix

package view_test

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/savings/savingsview"
)

// savingsProbe is the script the test adds to the savings page (the view runs none):
// it writes into the framing page the viewport's and the page's widths; the chart's
// rendered box; for each day group of the chart, its day, its bars and how many of
// them Chromium drew with a size; each table's right edge and whether a box of the
// viewport scrolls it; and the text of each row of the day totals.
const savingsProbe = `<script>(function () {
  var vw = document.documentElement.clientWidth, out = ["viewport " + vw, "page " + document.documentElement.scrollWidth];
  var svg = document.querySelector("svg.savings-chart");
  if (svg) {
    var r = svg.getBoundingClientRect();
    out.push("chart " + Math.round(r.width) + " " + Math.round(r.height) + " " + Math.ceil(r.right));
    svg.querySelectorAll("g.day").forEach(function (g) {
      var bars = g.querySelectorAll("rect.bar"), drawn = 0;
      bars.forEach(function (b) { var br = b.getBoundingClientRect(); if (br.width > 0 && br.height > 0) drawn++; });
      out.push("day " + g.getAttribute("data-day") + " " + bars.length + " " + drawn);
    });
  }
  document.querySelectorAll("table").forEach(function (t) {
    var scrolls = false;
    for (var p = t.parentElement; p; p = p.parentElement) {
      var o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll") { scrolls = p.getBoundingClientRect().right <= vw + 0.5; break; }
    }
    out.push("table " + t.id + " " + Math.ceil(t.getBoundingClientRect().right) + " " + scrolls);
  });
  document.querySelectorAll("#daytotals tbody tr").forEach(function (tr) {
    var cells = [];
    tr.querySelectorAll("td").forEach(function (td) { cells.push(td.textContent.trim()); });
    out.push("row " + cells.join("|"));
  });
  var top = parent.document, pre = top.createElement("pre");
  pre.id = "probe"; pre.textContent = out.join("\n"); top.body.appendChild(pre);
})();</script>`

// Chromium renders the savings page's chart, one group of bars per day with
// exchanges, each drawn, and the day totals' table with the report's figures; at a
// phone's width (390 px) as at a desktop's (1000 px), nothing is wider than the screen.
func TestSavingsChartInChromium(t *testing.T) {
	bin := chromiumBinary(t)
	cfg := tokenConfig()
	cfg.Savings = savingsview.Reader(pricesT(t))
	f := newFixture(t, cfg)
	days := seedLedger(t, f.st, "b")
	var rep savingsJSON
	f.getJSON(t, "/api/savings?days=14", &rep)
	proxy := framingProxy(t, f, savingsProbe)

	line := regexp.MustCompile(`(?m)^(viewport|page) (\d+)$|^chart (\d+) (\d+) (-?\d+)$|^day (\S+) (\d+) (\d+)$|^table (\S*) (-?\d+) (true|false)$|^row (.*)$`)
	for _, width := range []int{390, 1000} {
		dom := chromiumDOM(t, bin, proxy.URL+"/__frame?width="+strconv.Itoa(width)+"&path="+url.QueryEscape("/savings?days=14"),
			"--window-size="+strconv.Itoa(width+100)+",900")
		_, rest, ok := strings.Cut(dom, `<pre id="probe">`)
		if !ok {
			t.Fatalf("%d px: the probe did not run:\n%.2000s", width, dom)
		}
		rest, _, _ = strings.Cut(rest, "</pre>")
		var viewport, page, chartW, chartH, chartRight int
		var groups []string
		var rows []string
		for _, m := range line.FindAllStringSubmatch(rest, -1) {
			switch {
			case m[1] == "viewport":
				viewport, _ = strconv.Atoi(m[2])
			case m[1] == "page":
				page, _ = strconv.Atoi(m[2])
			case m[3] != "":
				chartW, _ = strconv.Atoi(m[3])
				chartH, _ = strconv.Atoi(m[4])
				chartRight, _ = strconv.Atoi(m[5])
			case m[6] != "":
				groups = append(groups, m[6])
				if m[7] == "0" || m[7] != m[8] {
					t.Errorf("%d px: day %s has %s bars, %s drawn; want every bar drawn", width, m[6], m[7], m[8])
				}
			case m[9] != "" || m[10] != "":
				right, _ := strconv.Atoi(m[10])
				if right > viewport && m[11] != "true" {
					t.Errorf("%d px: table %q reaches %d px and does not scroll within the screen", width, m[9], right)
				}
			default:
				rows = append(rows, m[12])
			}
		}
		if viewport == 0 || viewport > width+10 {
			t.Fatalf("%d px: viewport %d px:\n%s", width, viewport, rest)
		}
		if page > viewport {
			t.Errorf("%d px: the page is %d px wide on a %d px screen: cut off at the right", width, page, viewport)
		}
		if chartW < viewport/2 || chartRight > viewport || chartH < 100 {
			t.Errorf("%d px: the chart is %d×%d px, reaching %d px; want at least half the screen's width, within it", width, chartW, chartH, chartRight)
		}
		if strings.Join(groups, ",") != strings.Join(days, ",") {
			t.Errorf("%d px: chart day groups %q; want one per day with exchanges, %q", width, groups, days)
		}
		if len(rows) != len(rep.ByDay.Rows)+1 {
			t.Fatalf("%d px: %d rows in the day totals; want %d days and the total:\n%s", width, len(rows), len(rep.ByDay.Rows), rest)
		}
		for i, r := range append(rep.ByDay.Rows, rep.ByDay.Total) {
			cells := strings.Split(rows[i], "|")
			want := []string{num(int(r.Exchanges)), num(int(r.Without.Input)), num(int(r.With.Input)), num(int(r.Summarizer.Tokens())), num(int(r.SavedTokens))}
			if len(cells) < 6 || strings.Join(cells[1:6], "|") != strings.Join(want, "|") {
				t.Errorf("%d px: day totals row %d is %q; want %q after the day", width, i, rows[i], want)
			}
		}
		t.Logf("/savings at %d px: %s", width, strings.ReplaceAll(rest, "\n", "; "))
	}
}
