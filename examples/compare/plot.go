package main

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The picture is 900×600 CSS pixels: 675×450 pt.
const (
	figWidth  = 675 * vg.Length(1)
	figHeight = 450 * vg.Length(1)
	// zoomShare is the part of the width given to the zoom on the boundary.
	zoomShare = 0.3
)

var (
	colAllowed = color.RGBA{R: 0x1a, G: 0x98, B: 0x50, A: 0xff}
	colDenied  = color.RGBA{R: 0xd7, G: 0x30, B: 0x27, A: 0xff}
	colWindow  = color.RGBA{R: 0xd6, G: 0xe6, B: 0xf5, A: 0xff}
	colZoom    = color.RGBA{R: 0xee, G: 0xee, B: 0xee, A: 0xff}
	colGuide   = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
)

// lane is how far above (allowed) and below (denied) its row a mark sits, so
// the two stay apart where a burst crowds them together.
const lane = 0.12

// The zoom shows the boundary bursts.
var (
	zoomFrom = boundary - limit*burstGap - 150*time.Millisecond
	zoomTo   = boundary + limit*burstGap + 100*time.Millisecond
)

// The text is set in Liberation Sans, which is metric-compatible with Arial
// and Helvetica. The SVG names it without embedding it (that would add half a
// megabyte), so its style lists those as fallbacks.
var (
	textFont    = font.Font{Typeface: "Liberation", Variant: "Sans"}
	svgFamily   = []byte("font-family:Liberation Sans;")
	svgFallback = []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")
)

// WriteSVG draws the outcomes as an SVG picture to w.
func WriteSVG(w io.Writer, outs []Outcome) error {
	c := vgsvg.New(figWidth, figHeight)
	if err := drawFigure(draw.New(c), outs); err != nil {
		return err
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	_, err := w.Write(bytes.ReplaceAll(buf.Bytes(), svgFamily, svgFallback))
	return err
}

// WritePNG draws the outcomes as a 900×600 PNG picture to w.
func WritePNG(w io.Writer, outs []Outcome) error {
	c := vgimg.NewWith(vgimg.UseWH(figWidth, figHeight), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	if err := drawFigure(draw.New(c), outs); err != nil {
		return err
	}
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// drawFigure draws the whole timeline on the left and the zoom on the
// boundary on the right.
func drawFigure(dc draw.Canvas, outs []Outcome) error {
	plot.DefaultFont, plotter.DefaultFont = textFont, textFont
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	main, err := timeline(outs)
	if err != nil {
		return err
	}
	zoom, err := zoomed(outs)
	if err != nil {
		return err
	}
	split := dc.Min.X + vg.Length(1-zoomShare)*(dc.Max.X-dc.Min.X)
	pad := vg.Points(4)
	main.Draw(draw.Crop(dc, pad, split-dc.Max.X, pad, -pad))
	zoom.Draw(draw.Crop(dc, split-dc.Min.X+pad, -2*pad, pad, -pad))
	return nil
}

// rowOf is the y of each algorithm's row, top to bottom.
func rowOf(i, n int) float64 { return float64(n - 1 - i) }

// labelRise is how far above its row a row's label sits.
const labelRise = 0.22

// newPanel returns a plot with one row per outcome and room above the top
// row. The rows are named by labels inside the plot, which stay clear of the
// axis whatever font a viewer substitutes.
func newPanel(title string, outs []Outcome, from, to time.Duration) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = "simulated time (s)"
	p.X.Label.TextStyle.Font.Size = vg.Points(10)
	p.X.Tick.Label.Font.Size = vg.Points(9)
	p.X.Min, p.X.Max = from.Seconds(), to.Seconds()
	p.Y.Min, p.Y.Max = -0.5, float64(len(outs))-0.5+0.6
	var ticks plot.ConstantTicks
	for i := range outs {
		ticks = append(ticks, plot.Tick{Value: rowOf(i, len(outs))})
	}
	p.Y.Tick.Marker = ticks
	p.Y.Padding = 0
	return p
}

// rowLabels returns text, one per row, at x, just above each row.
func rowLabels(x float64, texts []string) (*plotter.Labels, error) {
	var ls plotter.XYLabels
	for i, t := range texts {
		ls.XYs = append(ls.XYs, plotter.XY{X: x, Y: rowOf(i, len(texts)) + labelRise})
		ls.Labels = append(ls.Labels, t)
	}
	labels, err := plotter.NewLabels(ls)
	if err != nil {
		return nil, err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Font.Size = vg.Points(9)
	}
	labels.Offset = vg.Point{X: vg.Points(3)}
	return labels, nil
}

// describe names each algorithm with its configuration.
func describe(name string) string {
	switch name {
	case nameTokenBucket:
		return fmt.Sprintf("token bucket: capacity %d, refills %g/s", limit, rate)
	case nameGCRA:
		return fmt.Sprintf("GCRA: %d per %.0f s, burst %d", limit, period.Seconds(), limit)
	case nameFixedWindow:
		return fmt.Sprintf("fixed window: %d per %.0f s window", limit, period.Seconds())
	case nameSlidingLog:
		return fmt.Sprintf("sliding log: %d in any %.0f s", limit, period.Seconds())
	case nameCounter:
		return fmt.Sprintf("sliding counter: %d per %.0f s, the previous window weighted", limit, period.Seconds())
	case nameCalendar:
		return fmt.Sprintf("calendar window: %d per minute of the wall clock", quota)
	}
	return name
}

// windowInset is how far, in seconds, a window's band is drawn inside its
// ends.
const windowInset = 0.12

// windowLength is the length of the windows drawn on an algorithm's row: a
// fixed window's period or a calendar minute; 0 for the others, whose
// windows are not drawn.
func windowLength(name string) time.Duration {
	switch name {
	case nameFixedWindow:
		return period
	case nameCalendar:
		return time.Minute
	}
	return 0
}

// timeline is the whole simulation, one row per algorithm.
func timeline(outs []Outcome) (*plot.Plot, error) {
	end := horizon + time.Second
	p := newPanel(fmt.Sprintf("Same requests, six limiters: five of %d per %.0f s, one of %d per minute", limit, period.Seconds(), quota), outs, 0, end)
	p.X.Tick.Marker = secondTicks{step: 10, minor: 5}

	n := len(outs)
	p.Add(band{col: colZoom, rects: []rect{{zoomFrom.Seconds(), zoomTo.Seconds(), p.Y.Min, float64(n) - 0.5}}})
	grid := plotter.NewGrid()
	grid.Horizontal.Color = color.Transparent
	grid.Vertical.Color = color.Gray{Y: 0xe0}
	p.Add(grid)

	var windows band
	windows.col = colWindow
	var names []string
	for i, o := range outs {
		names = append(names, describe(o.Name))
		length := windowLength(o.Name)
		if length == 0 {
			continue
		}
		y := rowOf(i, n)
		for _, w := range o.Windows(length) {
			// Inset a little, so that windows which abut stay apart.
			windows.rects = append(windows.rects, rect{w.Start.Seconds() + windowInset, w.End.Seconds() - windowInset, y - 0.36, y + 0.36})
		}
	}
	p.Add(windows)

	allowed, denied, err := marks(outs, 0, end, 2.3)
	if err != nil {
		return nil, err
	}
	p.Add(allowed, denied)
	labels, err := rowLabels(0, names)
	if err != nil {
		return nil, err
	}
	p.Add(labels)

	p.Legend.Top, p.Legend.Left = true, true // text after the icons: a wider fallback font grows away from them
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.Padding = vg.Points(2)
	p.Legend.ThumbnailWidth = vg.Points(12)
	p.Legend.Add("allowed", allowed)
	p.Legend.Add("denied", denied)
	p.Legend.Add("a window: opened by a request (fixed), by the clock (calendar)", windows)
	return p, nil
}

// zoomed is the span around the boundary bursts, annotated with how many each
// algorithm let through in it.
func zoomed(outs []Outcome) (*plot.Plot, error) {
	p := newPanel("The grey band, zoomed", outs, zoomFrom, zoomTo)
	p.X.Tick.Marker = secondTicks{step: 0.5, minor: 0.1}

	n := len(outs)
	edge, err := plotter.NewLine(plotter.XYs{{X: boundary.Seconds(), Y: -0.5}, {X: boundary.Seconds(), Y: float64(n) - 0.5}})
	if err != nil {
		return nil, err
	}
	edge.Color = colGuide
	edge.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(edge)

	allowed, denied, err := marks(outs, zoomFrom, zoomTo, 3)
	if err != nil {
		return nil, err
	}
	p.Add(allowed, denied)

	var notes []string
	for _, o := range outs {
		got, of := o.Between(zoomFrom, zoomTo)
		notes = append(notes, fmt.Sprintf("%s: %d of %d allowed", o.Name, got, of))
	}
	labels, err := rowLabels(zoomFrom.Seconds(), notes)
	if err != nil {
		return nil, err
	}
	p.Add(labels)

	edgeNote, err := plotter.NewLabels(plotter.XYLabels{
		XYs:    []plotter.XY{{X: boundary.Seconds(), Y: float64(n) - 0.45}},
		Labels: []string{fmt.Sprintf("the window opened at %.0f s ends", opener.Seconds())},
	})
	if err != nil {
		return nil, err
	}
	edgeNote.TextStyle[0].Font.Size = vg.Points(9)
	edgeNote.TextStyle[0].XAlign = draw.XCenter
	edgeNote.TextStyle[0].Color = colGuide
	p.Add(edgeNote)
	return p, nil
}

// marks returns the allowed and denied requests between from and to as
// scatters, with glyphs of radius r points.
func marks(outs []Outcome, from, to time.Duration, r float64) (allowed, denied *plotter.Scatter, err error) {
	var ok, no plotter.XYs
	n := len(outs)
	for i, o := range outs {
		y := rowOf(i, n)
		for _, d := range o.Decisions {
			if d.At < from || d.At > to {
				continue
			}
			if d.Allowed {
				ok = append(ok, plotter.XY{X: d.At.Seconds(), Y: y + lane})
			} else {
				no = append(no, plotter.XY{X: d.At.Seconds(), Y: y - lane})
			}
		}
	}
	if allowed, err = plotter.NewScatter(ok); err != nil {
		return nil, nil, err
	}
	allowed.GlyphStyle = draw.GlyphStyle{Color: colAllowed, Radius: vg.Points(r), Shape: draw.CircleGlyph{}}
	if denied, err = plotter.NewScatter(no); err != nil {
		return nil, nil, err
	}
	denied.GlyphStyle = draw.GlyphStyle{Color: colDenied, Radius: vg.Points(r), Shape: draw.CrossGlyph{}}
	return allowed, denied, nil
}

// secondTicks labels every step seconds and marks every minor.
type secondTicks struct{ step, minor float64 }

// Ticks implements plot.Ticker.
func (s secondTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for i := int(lo / s.minor); float64(i)*s.minor <= hi+1e-9; i++ {
		v := float64(i) * s.minor
		if v < lo-1e-9 {
			continue
		}
		t := plot.Tick{Value: v}
		if k := v / s.step; k-float64(int(k+0.5)) < 1e-9 && float64(int(k+0.5))-k < 1e-9 {
			t.Label = fmt.Sprintf("%g", v)
		}
		ts = append(ts, t)
	}
	return ts
}

// rect is an axis-aligned rectangle in data coordinates.
type rect struct{ x0, x1, y0, y1 float64 }

// band fills rectangles in data coordinates with one colour.
type band struct {
	col   color.Color
	rects []rect
}

// Plot implements plot.Plotter.
func (b band) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, r := range b.rects {
		pts := []vg.Point{
			{X: trX(r.x0), Y: trY(r.y0)},
			{X: trX(r.x1), Y: trY(r.y0)},
			{X: trX(r.x1), Y: trY(r.y1)},
			{X: trX(r.x0), Y: trY(r.y1)},
		}
		c.FillPolygon(b.col, c.ClipPolygonXY(pts))
	}
}

// Thumbnail implements plot.Thumbnailer.
func (b band) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.col, []vg.Point{
		{X: c.Min.X, Y: c.Min.Y},
		{X: c.Max.X, Y: c.Min.Y},
		{X: c.Max.X, Y: c.Max.Y},
		{X: c.Min.X, Y: c.Max.Y},
	})
}
