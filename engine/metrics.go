package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"homework/engine/spec"
)

// Metrics are the engine's Prometheus collectors.
type Metrics struct {
	iterationsStarted prometheus.Counter
	iterationDuration prometheus.Histogram
	llmTokens         prometheus.Counter
	llmCost           prometheus.Counter
	webhookDeliveries *prometheus.CounterVec
}

func newMetrics() *Metrics {
	return &Metrics{
		iterationsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "homework_iterations_total", Help: "Iterations started."}),
		iterationDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "homework_iteration_duration_seconds", Help: "Duration of finished iterations.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}),
		llmTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "homework_llm_tokens_total", Help: "Model tokens used (prompt + completion)."}),
		llmCost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "homework_llm_cost_usd_total", Help: "Model cost in US dollars (priced calls only)."}),
		webhookDeliveries: newWebhookCounter(),
	}
}

// Register registers the engine's collectors, including gauges read from the
// database and the bus at scrape time, on reg.
func (e *Engine) Register(reg prometheus.Registerer) error {
	m := e.metrics
	for _, c := range []prometheus.Collector{m.iterationsStarted, m.iterationDuration, m.llmTokens, m.llmCost, m.webhookDeliveries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "homework_sse_subscribers", Help: "Live event-stream subscribers."},
			func() float64 { return float64(e.bus.Subscribers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "homework_queue_depth", Help: "Iteration jobs waiting to be worked."},
			func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				n, _ := e.store.QueueDepth(ctx)
				return float64(n)
			}),
		&runsCollector{db: e.store, desc: prometheus.NewDesc("homework_runs", "Runs by status.", []string{"status"}, nil)},
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

type runsCollector struct {
	db   spec.Store
	desc *prometheus.Desc
}

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.db.CountAllRunsByStatus(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, s := range spec.Statuses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s]), s)
	}
}
