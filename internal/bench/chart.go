package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
)

// series is one line of a chart.
type series struct {
	name   string
	color  color.RGBA
	points [][2]float64
	dashed bool
	// markers draws each point as a square, for series of a few points.
	markers bool
}

// chart is a line chart with linear axes starting at 0.
type chart struct {
	title, xLabel, yLabel string
	series                []series
	// xTicks, when set, are the x values labelled; else five even ones.
	xTicks []float64
	// yFormat formats a y tick label.
	yFormat func(float64) string
}

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{200, 200, 200, 255}
	red   = color.RGBA{200, 40, 40, 255}
	blue  = color.RGBA{30, 90, 200, 255}
	green = color.RGBA{20, 140, 60, 255}
	dark  = color.RGBA{110, 110, 110, 255}
)

const (
	chartW, chartH                            = 960, 600
	marginL, marginR, marginTop, marginBottom = 120, 30, 60, 80
)

// draw renders the chart.
func (c chart) draw() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	var xMax, yMax float64
	for _, s := range c.series {
		for _, p := range s.points {
			xMax, yMax = math.Max(xMax, p[0]), math.Max(yMax, p[1])
		}
	}
	for _, t := range c.xTicks {
		xMax = math.Max(xMax, t)
	}
	if xMax == 0 {
		xMax = 1
	}
	yMax = niceCeil(yMax * 1.05)
	pw, ph := chartW-marginL-marginR, chartH-marginTop-marginBottom
	px := func(x float64) int { return marginL + int(math.Round(x/xMax*float64(pw))) }
	py := func(y float64) int { return marginTop + ph - int(math.Round(y/yMax*float64(ph))) }
	// Grid and y ticks.
	for i := 0; i <= 5; i++ {
		y := yMax * float64(i) / 5
		line(img, marginL, py(y), marginL+pw, py(y), grey, false)
		label := c.yFormat(y)
		drawText(img, marginL-10-textWidth(label), py(y)-textHeight/2, label, black)
	}
	xs := c.xTicks
	if len(xs) == 0 {
		for i := 0; i <= 5; i++ {
			xs = append(xs, xMax*float64(i)/5)
		}
	}
	for _, x := range xs {
		line(img, px(x), marginTop+ph, px(x), marginTop+ph+6, black, false)
		label := trimFloat(x)
		drawText(img, px(x)-textWidth(label)/2, marginTop+ph+12, label, black)
	}
	line(img, marginL, marginTop, marginL, marginTop+ph, black, false)
	line(img, marginL, marginTop+ph, marginL+pw, marginTop+ph, black, false)
	drawText(img, (chartW-textWidth(c.title))/2, 18, c.title, black)
	drawText(img, marginL+(pw-textWidth(c.xLabel))/2, chartH-30, c.xLabel, black)
	drawTextUp(img, 16, marginTop+(ph+textWidth(c.yLabel))/2, c.yLabel, black)
	// Lines, then the legend.
	for _, s := range c.series {
		for i := 1; i < len(s.points); i++ {
			a, b := s.points[i-1], s.points[i]
			thick(img, px(a[0]), py(a[1]), px(b[0]), py(b[1]), s.color, s.dashed)
		}
		if s.markers {
			for _, p := range s.points {
				square(img, px(p[0]), py(p[1]), 5, s.color)
			}
		}
	}
	ly := marginTop + 10
	for _, s := range c.series {
		thick(img, marginL+20, ly+textHeight/2, marginL+60, ly+textHeight/2, s.color, s.dashed)
		if s.markers {
			square(img, marginL+40, ly+textHeight/2, 5, s.color)
		}
		drawText(img, marginL+70, ly, s.name, black)
		ly += textHeight + 10
	}
	return img
}

// niceCeil rounds x up to 1, 2 or 5 times a power of ten.
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// line draws a one-pixel line (Bresenham); dashed leaves gaps.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for n := 0; ; n++ {
		if !dashed || n%12 < 7 {
			img.Set(x0, y0, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

// thick draws a three-pixel line.
func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, dashed bool) {
	for d := -1; d <= 1; d++ {
		line(img, x0, y0+d, x1, y1+d, c, dashed)
		line(img, x0+d, y0, x1+d, y1, c, dashed)
	}
}

func square(img *image.RGBA, x, y, r int, c color.Color) {
	draw.Draw(img, image.Rect(x-r, y-r, x+r+1, y+r+1), &image.Uniform{c}, image.Point{}, draw.Src)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

func millions(y float64) string { return fmt.Sprintf("%sM", trimFloat(y/1e6)) }

func plain(y float64) string { return thousands(y) }

// WriteCharts writes the PNG charts of the measurements that ran into dir: the token
// curve (tokens.png), worker scale-out (workers.png) and trigger scale-out
// (trigger.png). It returns their paths.
func (r *Report) WriteCharts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var charts []namedChart
	if tr := r.Tokens; len(tr.CurveWith) > 0 {
		charts = append(charts, namedChart{"tokens.png", tokensChart(tr)})
	}
	if len(r.ScaleOut) > 0 {
		charts = append(charts, namedChart{"workers.png", workersChart(r.ScaleOut)})
	}
	if ir := r.Ingest; len(ir.Rows) > 0 {
		charts = append(charts, namedChart{"trigger.png", triggerChart(ir)})
	}
	var paths []string
	for _, c := range charts {
		p := filepath.Join(dir, c.name)
		f, err := os.Create(p)
		if err != nil {
			return paths, err
		}
		err = png.Encode(f, c.c.draw())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// namedChart is a chart and the name of its file.
type namedChart struct {
	name string
	c    chart
}

// tokensChart is the token curve: cumulative input tokens per turn, with and
// without compaction.
func tokensChart(tr TokenReport) chart {
	curve := func(ys []float64) [][2]float64 {
		var ps [][2]float64
		for i, y := range ys {
			ps = append(ps, [2]float64{float64(i + 1), y})
		}
		return ps
	}
	return chart{
		title:  fmt.Sprintf("Cumulative input tokens per turn, %dk window (mean of %d sessions)", tr.Window/1000, tr.Sessions),
		xLabel: "turn", yLabel: "cumulative input tokens", yFormat: millions,
		series: []series{
			{name: "without compaction (whole history every turn)", color: red, points: curve(tr.CurveWithout)},
			{name: "with compaction (" + tr.Strategy + "), summarizer not included", color: blue, points: curve(tr.CurveWith)},
		}}
}

// workersChart is worker scale-out: compactions per second by worker slots, in one
// process (against the ideal) and in two.
func workersChart(rows []ScaleRow) chart {
	var one float64
	var measured, ideal, two [][2]float64
	var ticks []float64
	for _, s := range rows {
		if s.Processes == 1 {
			if s.Slots == 1 {
				one = s.PerSec
			}
			measured = append(measured, [2]float64{float64(s.Slots), s.PerSec})
			ticks = append(ticks, float64(s.Slots))
		} else {
			two = append(two, [2]float64{float64(s.Slots), s.PerSec})
		}
	}
	for _, p := range measured {
		ideal = append(ideal, [2]float64{p[0], p[0] * one})
	}
	ss := []series{
		{name: "ideal (slots x one slot)", color: dark, points: ideal, dashed: true},
		{name: "one process", color: blue, points: measured, markers: true},
	}
	if len(two) > 0 {
		ss = append(ss, series{name: "two processes", color: green, points: two, markers: true})
	}
	return chart{title: "Worker scale-out, fake LLM answering in 200 ms",
		xLabel: "worker slots", yLabel: "compactions per second", yFormat: plain, xTicks: ticks, series: ss}
}

// triggerChart is trigger scale-out: ingest until the trigger drained (and its drain
// of stored messages) by trigger partitions, in one trigger process and in two,
// against raw JetStream.
func triggerChart(ir IngestReport) chart {
	var one, two, drainOne, drainTwo [][2]float64
	top := 4.0
	for _, x := range ir.Rows {
		p := float64(x.Partitions)
		top = max(top, p)
		if x.Processes == 1 {
			one = append(one, [2]float64{p, x.MsgsPerSec})
			drainOne = append(drainOne, [2]float64{p, x.TriggerDrainMsgsPerSec})
		} else {
			two = append(two, [2]float64{p, x.MsgsPerSec})
			drainTwo = append(drainTwo, [2]float64{p, x.TriggerDrainMsgsPerSec})
		}
	}
	var ticks []float64
	for t := 0.0; t <= top; t++ {
		ticks = append(ticks, t)
	}
	ss := []series{
		{name: "raw JetStream: async publish + bare consumer", color: dark, points: [][2]float64{{0, ir.RawMsgsPerSec}, {top, ir.RawMsgsPerSec}}, dashed: true},
		{name: "one trigger process: publish until drained", color: blue, points: one, markers: true},
		{name: "one trigger process: draining stored messages", color: blue, points: drainOne, dashed: true, markers: true},
	}
	if len(two) > 0 {
		ss = append(ss,
			series{name: "two trigger processes: publish until drained", color: green, points: two, markers: true},
			series{name: "two trigger processes: draining stored messages", color: green, points: drainTwo, dashed: true, markers: true})
	}
	return chart{title: "Ingest until the trigger drained, by trigger partitions and processes",
		xLabel: "trigger partitions", yLabel: "messages per second", yFormat: plain, xTicks: ticks, series: ss}
}
