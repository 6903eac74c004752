// Package metrics holds the gateway's Prometheus metrics. Label values are
// bounded: partner ids come from the partner directory (anything else is
// counted as "unknown"), outcomes and reasons from fixed lists.
package metrics

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edigateway/gateway/internal/trust"
)

// Outcomes of a message, the values of gateway_messages_total's outcome label.
const (
	Processed            = "processed"
	Duplicate            = "duplicate"
	DuplicateInterchange = "duplicate_interchange"
	Drift                = "drift"
	Rejected             = "rejected"
	InFlight             = "in_flight"
	Unavailable          = "unavailable"
	HandlerFailed        = "handler_failed"
	Error                = "error"
)

// Unknown is the partner label of a message whose partner is not in the
// directory (unknown sender, or a message refused before it was identified).
const Unknown = "unknown"

// OtherReason is the reason label of a rejection whose reason is not in the
// fixed list.
const OtherReason = "other"

// Metrics is one gateway's set of metrics on its own registry.
type Metrics struct {
	Registry *prometheus.Registry
	log      *slog.Logger // scrape read errors (nil: slog.Default())

	messages        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	handlerDuration *prometheus.HistogramVec
	receivedBytes   *prometheus.CounterVec
	inFlight        *prometheus.GaugeVec
	outboxAttempts  *prometheus.CounterVec
	storeDuration   *prometheus.HistogramVec
	configReloads   *prometheus.CounterVec

	outboundAttempts *prometheus.CounterVec
	outboundDuration *prometheus.HistogramVec
	outboundFinal    *prometheus.CounterVec

	partners atomic.Pointer[map[string]bool]
}

// New registers every metric on a fresh registry, with the Go runtime and
// process collectors and gateway_build_info{version,goversion}.
func New(version string) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.messages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_messages_total",
		Help: "Messages received, by protocol, partner and outcome (processed, duplicate, duplicate_interchange, drift, rejected, in_flight, unavailable, handler_failed, error); reason is set for rejected only.",
	}, []string{"protocol", "partner", "outcome", "reason"})
	m.requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_request_duration_seconds",
		Help:    "Time from request start to the end of the response on the partner listener, by protocol and HTTP status code.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, []string{"protocol", "code"})
	m.handlerDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_handler_duration_seconds",
		Help:    "Time the business handler took per message, by protocol and result (ok, error).",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"protocol", "result"})
	m.receivedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_received_bytes_total",
		Help: "Request body bytes read on the partner listener, by protocol.",
	}, []string{"protocol"})
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_exchanges_in_flight",
		Help: "Requests being processed on the partner listener, by protocol.",
	}, []string{"protocol"})
	m.outboxAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_mdn_outbox_attempts_total",
		Help: "Asynchronous MDN delivery attempts, by result (delivered, retry, gave_up).",
	}, []string{"result"})
	m.storeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_store_operation_duration_seconds",
		Help:    "Latency of dedup store and ledger operations, by operation.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"op"})
	m.configReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_config_reloads_total",
		Help: "Configuration reloads, by result (success, failure).",
	}, []string{"result"})
	m.outboundAttempts, m.outboundDuration, m.outboundFinal = newOutboundMetrics()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_build_info",
		Help: "Always 1; the labels name the gateway's version and the Go version it was built with.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	m.Registry.MustRegister(m.messages, m.requestDuration, m.handlerDuration, m.receivedBytes, m.inFlight,
		m.outboxAttempts, m.storeDuration, m.configReloads, build, m.outboundAttempts, m.outboundDuration, m.outboundFinal,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"success", "failure"} {
		m.configReloads.WithLabelValues(r)
	}
	for _, r := range []string{"delivered", "retry", "gave_up"} {
		m.outboxAttempts.WithLabelValues(r)
	}
	m.SetPartners(nil)
	return m
}

// Handler serves the registry in the Prometheus exposition format. A
// figure that could not be read at scrape time (the store did not answer
// within the readiness timeout) is left out and logged, and its source's
// gateway_scrape_source_up is 0: the rest of the scrape is served, so that
// the gateway stays observable while its store is down.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry,
		ErrorHandling: promhttp.ContinueOnError, ErrorLog: scrapeErrorLog{m}})
}

// SetLogger sets where the scrape's read errors are logged (default
// slog.Default()).
func (m *Metrics) SetLogger(l *slog.Logger) { m.log = l }

type scrapeErrorLog struct{ m *Metrics }

func (e scrapeErrorLog) Println(v ...any) {
	l := e.m.log
	if l == nil {
		l = slog.Default()
	}
	l.Warn("metrics: a figure could not be read for the scrape; left out", "err", fmt.Sprint(v...))
}

// sourceUpDesc is gateway_scrape_source_up of one source (one descriptor
// per collector: a registry refuses a descriptor two collectors share).
func sourceUpDesc(source string) *prometheus.Desc {
	return prometheus.NewDesc("gateway_scrape_source_up",
		"1 when the figures of source (mdn_outbox, outbound) were read for this scrape, 0 when the read failed and they are left out.",
		nil, prometheus.Labels{"source": source})
}

var (
	outboxUpDesc   = sourceUpDesc("mdn_outbox")
	outboundUpDesc = sourceUpDesc("outbound")
)

// sourceUp is the gateway_scrape_source_up sample of a read.
func sourceUp(d *prometheus.Desc, err error) prometheus.Metric {
	v := 1.0
	if err != nil {
		v = 0
	}
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
}

// SetPartners sets the partner ids that may appear as label values; call it
// again after a reload. Any other id is counted as "unknown".
func (m *Metrics) SetPartners(ids []string) {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	m.partners.Store(&set)
}

// Partner returns the label value for a partner id.
func (m *Metrics) Partner(id string) string {
	if id != "" && (*m.partners.Load())[id] {
		return id
	}
	return Unknown
}

// Protocol returns the label value for a protocol name.
func Protocol(p string) string {
	switch p {
	case "as2", "as4":
		return p
	}
	return "other"
}

// Message counts one message's outcome. reason is used for Rejected only
// and is reduced to a fixed list (see Reason).
func (m *Metrics) Message(protocol, partner, outcome, reason string) {
	if outcome != Rejected {
		reason = ""
	} else {
		reason = Reason(reason)
	}
	m.messages.WithLabelValues(Protocol(protocol), m.Partner(partner), outcome, reason).Inc()
}

// reasons are the rejection reasons kept as label values: the AS2 MDN
// disposition modifiers (RFC 4130 section 7.5.3), the ebMS 3.0 error codes
// (section 6.7) and the pipeline's own.
var reasons = map[string]bool{
	"authentication-failed": true, "decryption-failed": true, "insufficient-message-security": true,
	"integrity-check-failed": true, "unexpected-processing-error": true, "unknown-trading-partner": true,
	"unsupported-format": true, "damaged-envelope": true, "too-large": true,
}

// Reason reduces a rejection detail to a bounded label value: an AS2
// disposition ("automatic-action/MDN-sent-automatically; processed/error:
// authentication-failed") gives its modifier, an ebMS error code
// ("EBMS:0101") itself; anything else is "other".
func Reason(s string) string {
	s = strings.TrimSpace(strings.ToLower(s))
	if i := strings.LastIndex(s, ":"); i >= 0 && !strings.HasPrefix(s, "ebms:") {
		s = strings.TrimSpace(s[i+1:])
	}
	if reasons[s] {
		return s
	}
	if code, ok := strings.CutPrefix(s, "ebms:"); ok && len(code) == 4 && strings.Trim(code, "0123456789") == "" {
		return "EBMS:" + code
	}
	return OtherReason
}

// Request is the partner listener's view of one request; call Done when
// the response is complete.
func (m *Metrics) Request(protocol string) (done func(code int, bodyBytes int64)) {
	protocol = Protocol(protocol)
	start := time.Now()
	g := m.inFlight.WithLabelValues(protocol)
	g.Inc()
	return func(code int, n int64) {
		g.Dec()
		m.requestDuration.WithLabelValues(protocol, fmt.Sprint(code)).Observe(time.Since(start).Seconds())
		m.receivedBytes.WithLabelValues(protocol).Add(float64(n))
	}
}

// Handler observes one business handler call.
func (m *Metrics) HandlerCall(protocol string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.handlerDuration.WithLabelValues(Protocol(protocol), result).Observe(d.Seconds())
}

// StoreOp observes one store operation.
func (m *Metrics) StoreOp(op string, d time.Duration) {
	m.storeDuration.WithLabelValues(op).Observe(d.Seconds())
}

// OutboxAttempt counts one asynchronous MDN delivery attempt: result is
// delivered, retry or gave_up.
func (m *Metrics) OutboxAttempt(result string) { m.outboxAttempts.WithLabelValues(result).Inc() }

// ConfigReload counts a configuration reload; ok false counts a failure.
func (m *Metrics) ConfigReload(ok bool) {
	if ok {
		m.configReloads.WithLabelValues("success").Inc()
	} else {
		m.configReloads.WithLabelValues("failure").Inc()
	}
}

// ConfigReloads is gateway_config_reloads_total (for tests).
func (m *Metrics) ConfigReloads() *prometheus.CounterVec { return m.configReloads }

// Certificate is one certificate the gateway trusts or holds.
type Certificate struct {
	Partner string // partner id, or "" for our own identity keys
	// Kind: as2, as4 (a partner's certificates), as2-send, as4-send (the
	// partner's encryption certificate of a send block), as2-tls-client,
	// as4-tls-client (our TLS client certificate for sending to the
	// partner) or identity (our keys).
	Kind string
	Cert *x509.Certificate
}

// WatchCertificates exports gateway_certificate_expiry_seconds{partner,kind,
// subject,serial}, the seconds until each certificate returned by list
// expires (negative once expired), computed at every scrape so that a
// reload that changes the list is reflected at once.
func (m *Metrics) WatchCertificates(list func() []Certificate) {
	m.Registry.MustRegister(&certCollector{list: list, now: time.Now})
}

var certDesc = prometheus.NewDesc("gateway_certificate_expiry_seconds",
	"Seconds until the certificate expires (negative when expired), for every partner certificate and identity key.",
	[]string{"partner", "kind", "subject", "serial"}, nil)

type certCollector struct {
	list func() []Certificate
	now  func() time.Time
}

func (c *certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certDesc }

func (c *certCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	seen := map[[4]string]bool{}
	for _, e := range c.list() {
		if e.Cert == nil {
			continue
		}
		partner := e.Partner
		if partner == "" {
			partner = "self"
		}
		labels := [4]string{partner, e.Kind, e.Cert.Subject.String(), trust.Serial(e.Cert)}
		if seen[labels] { // the same file listed twice would be a duplicate series
			continue
		}
		seen[labels] = true
		ch <- prometheus.MustNewConstMetric(certDesc, prometheus.GaugeValue, e.Cert.NotAfter.Sub(now).Seconds(), labels[:]...)
	}
}

// OutboxStats reports the queue of asynchronous MDNs waiting to be posted.
type OutboxStats func() (pending int, oldest time.Time, err error)

var (
	outboxDepthDesc = prometheus.NewDesc("gateway_mdn_outbox_depth",
		"Asynchronous MDNs waiting to be posted (pending deliveries).", nil, nil)
	outboxAgeDesc = prometheus.NewDesc("gateway_mdn_outbox_oldest_age_seconds",
		"Age of the oldest pending asynchronous MDN (0 when none).", nil, nil)
)

// WatchOutbox exports gateway_mdn_outbox_depth and
// gateway_mdn_outbox_oldest_age_seconds, read from stats at every scrape.
// A failing read exports neither (they are missing from the scrape, and
// gateway_scrape_source_up{source="mdn_outbox"} is 0).
func (m *Metrics) WatchOutbox(stats OutboxStats) {
	m.Registry.MustRegister(outboxCollector(stats))
}

type outboxCollector OutboxStats

func (c outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxDepthDesc
	ch <- outboxAgeDesc
	ch <- outboxUpDesc
}

func (c outboxCollector) Collect(ch chan<- prometheus.Metric) {
	n, oldest, err := c()
	ch <- sourceUp(outboxUpDesc, err)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(outboxDepthDesc, err)
		return
	}
	age := 0.0
	if n > 0 && !oldest.IsZero() {
		age = time.Since(oldest).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(outboxDepthDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(outboxAgeDesc, prometheus.GaugeValue, age)
}
