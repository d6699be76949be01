package views

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"homework/engine/spec"
)

// Charts are SVG drawn on the server: no script, nothing to load, and they
// pass the page's Content-Security-Policy (presentation attributes and CSS
// classes, no inline styles). Their viewBox is ChartWidth units wide and
// they scale to their container, so at a 390 px phone width one unit is
// about one CSS pixel and the 12-unit labels stay readable.

// ChartWidth is the width of every chart's viewBox.
const ChartWidth = 360

// BarChart is a horizontal bar chart: one labelled bar per row.
type BarChart struct {
	ID, Title, Caption string
	Bars               []Bar
	Max                float64 // the value of a full-length bar; 0: the largest bar
}

// Bar is one bar; Display is the value as printed beside it.
type Bar struct {
	Label   string
	Value   float64
	Display string
	Class   string // a CSS class for the fill (c-completed, c-stopped, ...)
}

// Height is the chart's viewBox height.
func (c BarChart) Height() int { return 4 + len(c.Bars)*barRow }

// Each row of a bar chart is its label on a line of its own, then the bar
// with its value after it: a long label cannot run into the bars, at any
// width (the whole drawing scales together).
const (
	barRow    = 34
	barValueW = 56
	barLabelN = 48 // characters of a label shown; about 6.5 units each
)

// BarY is the top of row i.
func (c BarChart) BarY(i int) int { return 2 + i*barRow }

// BarW is bar i's length, scaled to the largest bar.
func (c BarChart) BarW(i int) float64 {
	mx := c.Max
	for _, b := range c.Bars {
		mx = math.Max(mx, b.Value)
	}
	if mx <= 0 {
		return 0
	}
	return math.Max(1, c.Bars[i].Value/mx*float64(ChartWidth-barValueW))
}

// StackedChart is a column chart of stacked series, such as outcomes per
// week.
type StackedChart struct {
	ID, Title, Caption string
	Columns            []StackColumn
	Series             []Series
}

// Series is one stacked series with its CSS class.
type Series struct{ Key, Label, Class string }

// StackColumn is one column: a label and a value per series key.
type StackColumn struct {
	Label  string
	Values map[string]float64
}

// Stacked chart geometry.
const (
	stackH    = 150 // the plot's height
	stackTop  = 8
	stackAxis = 22 // the row under the plot for the column labels
)

// Height is the chart's viewBox height. The legend is not drawn in it but
// listed under it in HTML, where it wraps instead of overlapping.
func (c StackedChart) Height() int { return stackTop + stackH + stackAxis }

// Segment is one drawn rectangle of a stacked chart.
type Segment struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// Segments returns the rectangles to draw, bottom to top per column.
func (c StackedChart) Segments() []Segment {
	n := len(c.Columns)
	if n == 0 {
		return nil
	}
	mx := 0.0
	for _, col := range c.Columns {
		sum := 0.0
		for _, s := range c.Series {
			sum += col.Values[s.Key]
		}
		mx = math.Max(mx, sum)
	}
	if mx == 0 {
		return nil
	}
	slot := float64(ChartWidth-8) / float64(n)
	w := math.Min(40, slot*0.7)
	var out []Segment
	for i, col := range c.Columns {
		x := 4 + float64(i)*slot + (slot-w)/2
		y := float64(stackTop + stackH)
		for _, s := range c.Series {
			v := col.Values[s.Key]
			if v <= 0 {
				continue
			}
			h := v / mx * stackH
			y -= h
			out = append(out, Segment{X: x, Y: y, W: w, H: h, Class: s.Class,
				Title: fmt.Sprintf("%s · %s: %s", col.Label, s.Label, trimFloat(v))})
		}
	}
	return out
}

// AxisLabel is a column label under the plot.
type AxisLabel struct {
	X    float64
	Text string
}

// AxisLabels returns the column labels to print; with many columns only
// every k-th so that they do not overlap.
func (c StackedChart) AxisLabels() []AxisLabel {
	n := len(c.Columns)
	if n == 0 {
		return nil
	}
	slot := float64(ChartWidth-8) / float64(n)
	every := int(math.Ceil(60 / slot)) // a label needs about 60 units
	var out []AxisLabel
	for i, col := range c.Columns {
		if i%every == 0 {
			out = append(out, AxisLabel{X: 4 + float64(i)*slot + slot/2, Text: col.Label})
		}
	}
	return out
}

// Chart CSS classes per outcome.
var outcomeSeries = []Series{
	{spec.StatusCompleted, "completed", "c-completed"},
	{spec.StatusStopped, "stopped", "c-stopped"},
	{spec.StatusFailed, "failed", "c-failed"},
	{spec.StatusCanceled, "canceled", "c-canceled"},
	{"open", "not ended", "c-open"},
}

// OutcomesOverTime is a stacked column chart of run outcomes per ISO week.
func OutcomesOverTime(rows []spec.StatsRow) StackedChart {
	c := StackedChart{ID: "chart-outcomes", Title: "Outcomes over time", Caption: "Runs created per week, by how they ended.", Series: outcomeSeries}
	keys, groups := spec.GroupRows(rows, spec.GroupByWeek)
	for _, k := range keys {
		col := StackColumn{Label: k[2:], Values: map[string]float64{}} // "26-W47"
		for _, r := range groups[k] {
			if r.Ended() {
				col.Values[r.Status]++
			} else {
				col.Values["open"]++
			}
		}
		c.Columns = append(c.Columns, col)
	}
	return c
}

// StopReasonChart is the distribution of stop reasons over ended runs.
func StopReasonChart(f spec.Figures) BarChart {
	c := BarChart{ID: "chart-stop-reasons", Title: "Why runs ended", Caption: "Ended runs by stop reason."}
	keys := make([]string, 0, len(f.StopReasons))
	for k := range f.StopReasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := f.StopReasons[keys[i]], f.StopReasons[keys[j]]
		return a > b || a == b && keys[i] < keys[j]
	})
	for _, k := range keys {
		class := "c-stopped"
		switch k {
		case "completed":
			class = "c-completed"
		case "canceled":
			class = "c-canceled"
		case spec.StopError, spec.StopInterrupted, spec.StopModelUnavailable, spec.StopRateLimited, spec.StopStoreUnavailable:
			class = "c-failed"
		}
		c.Bars = append(c.Bars, Bar{Label: k, Value: float64(f.StopReasons[k]), Display: strconv.Itoa(f.StopReasons[k]), Class: class})
	}
	return c
}

// bucket is a histogram bucket [lo, hi).
type bucket struct {
	label  string
	lo, hi float64
}

func histogram(id, title, caption string, buckets []bucket, values []float64) BarChart {
	c := BarChart{ID: id, Title: title, Caption: caption}
	counts := make([]int, len(buckets))
	for _, v := range values {
		for i, b := range buckets {
			if v >= b.lo && v < b.hi {
				counts[i]++
				break
			}
		}
	}
	for i, b := range buckets {
		c.Bars = append(c.Bars, Bar{Label: b.label, Value: float64(counts[i]), Display: strconv.Itoa(counts[i]), Class: "c-bar"})
	}
	return c
}

// IterationsHistogram is the distribution of iterations per ended run.
func IterationsHistogram(rows []spec.StatsRow) BarChart {
	var vals []float64
	for _, r := range rows {
		if r.Ended() {
			vals = append(vals, float64(r.Iterations))
		}
	}
	inf := math.Inf(1)
	return histogram("chart-iterations", "Iterations per run", "Ended runs by how many iterations they took.", []bucket{
		{"0", 0, 1}, {"1", 1, 2}, {"2", 2, 3}, {"3–5", 3, 6}, {"6–10", 6, 11}, {"11–20", 11, 21}, {"21–50", 21, 51}, {"over 50", 51, inf},
	}, vals)
}

// CostHistogram is the distribution of cost per ended run.
func CostHistogram(rows []spec.StatsRow) BarChart {
	var vals []float64
	for _, r := range rows {
		if r.Ended() {
			vals = append(vals, r.CostUSD)
		}
	}
	inf := math.Inf(1)
	return histogram("chart-cost", "Cost per run", "Ended runs by what they cost.", []bucket{
		{"$0", 0, 1e-9}, {"under $0.01", 1e-9, 0.01}, {"$0.01–0.10", 0.01, 0.1}, {"$0.10–1", 0.1, 1},
		{"$1–10", 1, 10}, {"$10 or more", 10, inf},
	}, vals)
}

// CompareChart puts the rates of two selections side by side.
func CompareChart(a, b spec.Figures, la, lb string) BarChart {
	c := BarChart{ID: "chart-compare", Title: "Before and after", Caption: la + " (upper bar) against " + lb + " (lower bar).", Max: 1}
	for _, m := range []struct {
		name string
		get  func(spec.Figures) float64
	}{
		{"completion", func(f spec.Figures) float64 { return f.CompletionRate }},
		{"false completion", func(f spec.Figures) float64 { return f.FalseCompletionRate }},
		{"escalation", func(f spec.Figures) float64 { return f.EscalationRate }},
	} {
		c.Bars = append(c.Bars,
			Bar{Label: m.name + " · " + clip(la, 10), Value: m.get(a), Display: Percent(m.get(a)), Class: "c-a"},
			Bar{Label: m.name + " · " + clip(lb, 10), Value: m.get(b), Display: Percent(m.get(b)), Class: "c-b"})
	}
	return c
}

// Percent prints a 0..1 rate as a percentage.
func Percent(v float64) string { return strconv.FormatFloat(v*100, 'f', 0, 64) + "%" }

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fnum(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
