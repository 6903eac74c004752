package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edigateway/gateway/outbound"
)

// The outbound queue (package outbound): its figures read from the store at
// every scrape (WatchOutbound), the Sender's attempts (Attempt, the
// outbound Sender's Observer) and the messages that reach a final state
// (OutboundFinal, counted by the store's wrapper in package server).

// Outcomes of an outbound attempt, the values of
// gateway_outbound_attempts_total's outcome label; the Sender's other
// words are counted as OtherOutcome.
var attemptOutcomes = map[string]bool{"delivered": true, "refused": true, "retry": true, "awaiting": true, "gave_up": true, "lease_lost": true}

// OtherOutcome is the outcome label of an attempt outcome not in the list.
const OtherOutcome = "other"

func newOutboundMetrics() (attempts *prometheus.CounterVec, duration *prometheus.HistogramVec, final *prometheus.CounterVec) {
	attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_outbound_attempts_total",
		Help: "Attempts at sending an outbound message, by partner, protocol and outcome (delivered, refused, retry, awaiting, gave_up, lease_lost, other).",
	}, []string{"partner", "protocol", "outcome"})
	duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_outbound_attempt_duration_seconds",
		Help:    "Time one outbound attempt took (building, posting, reading the answer), by protocol.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, []string{"protocol"})
	final = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_outbound_final_total",
		Help: "Outbound messages that reached a final state, by partner, protocol and state (delivered, failed, cancelled); a resent message counts again when it ends again.",
	}, []string{"partner", "protocol", "state"})
	return attempts, duration, final
}

// AttemptOutcome reduces an attempt outcome to a bounded label value
// ("gave-up" and "gave_up" are the same).
func AttemptOutcome(s string) string {
	s = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	if attemptOutcomes[s] {
		return s
	}
	return OtherOutcome
}

// Metrics is the outbound Sender's Observer (outbound.Observer).
var _ interface {
	Attempt(partner string, p outbound.Protocol, outcome string, d time.Duration)
} = (*Metrics)(nil)

// Attempt counts one attempt of the outbound Sender and observes how long
// it took (it makes *Metrics an outbound Sender's Observer).
func (m *Metrics) Attempt(partner string, p outbound.Protocol, outcome string, d time.Duration) {
	proto := Protocol(string(p))
	m.outboundAttempts.WithLabelValues(m.Partner(partner), proto, AttemptOutcome(outcome)).Inc()
	m.outboundDuration.WithLabelValues(proto).Observe(d.Seconds())
}

// OutboundFinal counts a message that reached final state s (other states
// are not counted).
func (m *Metrics) OutboundFinal(partner string, p outbound.Protocol, s outbound.State) {
	if !s.Final() {
		return
	}
	m.outboundFinal.WithLabelValues(m.Partner(partner), Protocol(string(p)), string(s)).Inc()
}

// OutboundStats reads the outbound queue's figures per partner.
type OutboundStats func() ([]outbound.Stats, error)

var (
	outboundQueuedDesc = prometheus.NewDesc("gateway_outbound_queued",
		"Outbound messages queued (waiting for their first or next attempt, or being sent), by partner and protocol.",
		[]string{"partner", "protocol"}, nil)
	outboundOldestDesc = prometheus.NewDesc("gateway_outbound_oldest_queued_seconds",
		"Age of the oldest queued outbound message (since it was submitted), by partner and protocol.",
		[]string{"partner", "protocol"}, nil)
	outboundAwaitingDesc = prometheus.NewDesc("gateway_outbound_awaiting_mdn",
		"Outbound messages the partner took whose asynchronous MDN has not arrived yet, by partner and protocol.",
		[]string{"partner", "protocol"}, nil)
)

// WatchOutbound exports gateway_outbound_queued,
// gateway_outbound_oldest_queued_seconds and gateway_outbound_awaiting_mdn,
// read from stats at every scrape. A partner no longer in the directory is
// counted as "unknown" (figures summed, the oldest kept). A failing read
// leaves them out, as the async MDN outbox's figures
// (gateway_scrape_source_up{source="outbound"} is 0, the error logged).
func (m *Metrics) WatchOutbound(stats OutboundStats) {
	m.Registry.MustRegister(&outboundCollector{m: m, stats: stats, now: time.Now})
}

type outboundCollector struct {
	m     *Metrics
	stats OutboundStats
	now   func() time.Time
}

func (c *outboundCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboundQueuedDesc
	ch <- outboundOldestDesc
	ch <- outboundAwaitingDesc
	ch <- outboundUpDesc
}

func (c *outboundCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := c.stats()
	ch <- sourceUp(outboundUpDesc, err)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(outboundQueuedDesc, err)
		return
	}
	type sum struct {
		queued, awaiting int
		oldest           time.Time
	}
	by := map[[2]string]*sum{}
	var order [][2]string
	for _, s := range stats {
		k := [2]string{c.m.Partner(s.Partner), Protocol(string(s.Protocol))}
		t := by[k]
		if t == nil {
			t = &sum{}
			by[k] = t
			order = append(order, k)
		}
		t.queued += s.Queued
		t.awaiting += s.Awaiting
		if s.Queued > 0 && !s.OldestQueued.IsZero() && (t.oldest.IsZero() || s.OldestQueued.Before(t.oldest)) {
			t.oldest = s.OldestQueued
		}
	}
	now := c.now()
	for _, k := range order {
		t := by[k]
		age := 0.0
		if t.queued > 0 && !t.oldest.IsZero() {
			age = max(now.Sub(t.oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(outboundQueuedDesc, prometheus.GaugeValue, float64(t.queued), k[:]...)
		ch <- prometheus.MustNewConstMetric(outboundOldestDesc, prometheus.GaugeValue, age, k[:]...)
		ch <- prometheus.MustNewConstMetric(outboundAwaitingDesc, prometheus.GaugeValue, float64(t.awaiting), k[:]...)
	}
}
