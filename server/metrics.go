package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/metrics"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbox"
)

// The metrics are derived around the pipeline, not inside it: message
// outcomes from the audit records every exchange writes, handler latency
// from a wrapped handler, store latency from a wrapped store and ledger,
// request latency, bytes and in-flight requests from HTTP middleware.

// metricsSink counts message outcomes from the audit records. A record
// whose durable write failed counts only when it is the unavailable reply:
// the step it recorded did not take effect.
type metricsSink struct {
	audit.Sink
	m *metrics.Metrics
}

func (s metricsSink) Write(ctx context.Context, r audit.Record) error {
	err := s.Sink.Write(ctx, r)
	if outcome, reason := outcomeOf(r); outcome != "" && (err == nil || outcome == metrics.Unavailable) {
		s.m.Message(r.Protocol, r.Partner, outcome, reason)
	}
	return err
}

// WriteBatch implements audit.BatchWriter over the wrapped sink, counting
// each record as Write does.
func (s metricsSink) WriteBatch(ctx context.Context, rs []audit.Record) error {
	err := audit.WriteBatch(ctx, s.Sink, rs)
	for _, r := range rs {
		if outcome, reason := outcomeOf(r); outcome != "" && (err == nil || outcome == metrics.Unavailable) {
			s.m.Message(r.Protocol, r.Partner, outcome, reason)
		}
	}
	return err
}

// AppendBatch implements audit.Appender over the wrapped sink (WriteBatch
// when it is none), counting each record as Write does.
func (s metricsSink) AppendBatch(ctx context.Context, rs []audit.Record) (func(context.Context) error, error) {
	wait := func(context.Context) error { return nil }
	var err error
	if ap, ok := s.Sink.(audit.Appender); ok {
		wait, err = ap.AppendBatch(ctx, rs)
	} else {
		err = audit.WriteBatch(ctx, s.Sink, rs)
	}
	for _, r := range rs {
		if outcome, reason := outcomeOf(r); outcome != "" && (err == nil || outcome == metrics.Unavailable) {
			s.m.Message(r.Protocol, r.Partner, outcome, reason)
		}
	}
	return wait, err
}

// outcomeOf maps an audit record to the message outcome it settles, if any.
func outcomeOf(r audit.Record) (outcome, reason string) {
	decision, ok := Settled(r)
	if !ok {
		return "", ""
	}
	switch decision {
	case "accepted":
		return metrics.Processed, ""
	case "duplicate":
		return metrics.Duplicate, ""
	case "duplicate-interchange":
		return metrics.DuplicateInterchange, ""
	case "drift", "quarantined":
		return metrics.Drift, ""
	case "in-flight":
		return metrics.InFlight, ""
	case "unavailable":
		return metrics.Unavailable, ""
	case "abandoned":
		return metrics.HandlerFailed, ""
	case "error":
		return metrics.Error, ""
	case "rejected":
		if r.Step == audit.StepDecision {
			return metrics.Rejected, "damaged-envelope"
		}
		return metrics.Rejected, r.Disposition
	}
	return "", ""
}

// Settled reports whether r is the audit record that settles its message's
// outcome, and that outcome in the vocabulary of the logs' decision field:
// accepted, duplicate, duplicate-interchange, drift, quarantined, rejected,
// in-flight, unavailable, abandoned (the handler failed) or error. Each
// message writes exactly one settling record: its decision for duplicates,
// drift, in-flight and damaged envelopes, its handler step for handler
// failures, its reply for the rest.
func Settled(r audit.Record) (decision string, ok bool) {
	switch r.Step {
	case audit.StepDecision:
		switch r.Decision {
		case "duplicate", "drift", "quarantined", "rejected", "in-flight":
			return r.Decision, true
		case "in-flight-interchange":
			return "in-flight", true
		}
	case audit.StepHandler:
		if r.Decision == "error" {
			return "abandoned", true
		}
	case audit.StepReply:
		switch r.Decision {
		case "accepted", "duplicate-interchange", "unavailable", "rejected", "error":
			return r.Decision, true
		}
	}
	return "", false
}

// timedHandler observes the business handler's latency.
type timedHandler struct {
	h exchange.Handler
	m *metrics.Metrics
}

func (t timedHandler) Handle(ctx context.Context, msg *exchange.Message) error {
	start := time.Now()
	err := t.h.Handle(ctx, msg)
	t.m.HandlerCall(string(msg.Protocol), time.Since(start), err)
	return err
}

// timedStore observes the latency of the pipeline's dedup store calls.
type timedStore struct {
	dedup.Store
	m *metrics.Metrics
}

func (s timedStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	defer s.observe("claim", time.Now())
	return s.Store.Claim(ctx, req)
}

func (s timedStore) Accept(ctx context.Context, key dedup.Key, token dedup.Token, reply []byte) error {
	defer s.observe("accept", time.Now())
	return s.Store.Accept(ctx, key, token, reply)
}

func (s timedStore) Abandon(ctx context.Context, key dedup.Key, token dedup.Token) error {
	defer s.observe("abandon", time.Now())
	return s.Store.Abandon(ctx, key, token)
}

func (s timedStore) observe(op string, start time.Time) { s.m.StoreOp(op, time.Since(start)) }

// timeStore wraps be for the store latency metric, keeping its transactional
// accept (dedup.TxAcceptor) visible when it has one.
func timeStore(be dedup.Store, m *metrics.Metrics) dedup.Store {
	t := timedStore{Store: be, m: m}
	if _, ok := be.(dedup.TxAcceptor); ok {
		if _, ok := be.(dedup.Atomic); ok {
			return timedAtomicStore{timedTxStore{t}}
		}
		return timedTxStore{t}
	}
	return t
}

// RenewClaims passes the renewal of an exchange's claims on (the gateway's
// backends all renew), observed as op "renew".
func (s timedStore) RenewClaims(ctx context.Context, claims []dedup.HeldClaim) error {
	r, ok := s.Store.(dedup.Renewer)
	if !ok {
		return fmt.Errorf("server: store %T cannot renew claims: %w", s.Store, errors.ErrUnsupported)
	}
	defer s.observe("renew", time.Now())
	return r.RenewClaims(ctx, claims)
}

// timedTxStore is a timedStore over a store with a transactional accept.
type timedTxStore struct{ timedStore }

// timedAtomicStore is a timedTxStore over a store that is also a
// dedup.Atomic (both SQL stores).
type timedAtomicStore struct{ timedTxStore }

func (s timedAtomicStore) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	defer s.observe("atomic", time.Now())
	return s.Store.(dedup.Atomic).Atomically(ctx, fn)
}

func (s timedTxStore) AcceptTx(ctx context.Context, key dedup.Key, token dedup.Token, reply []byte, fn func(ctx context.Context, tx dedup.Tx) error) error {
	defer s.observe("accept_tx", time.Now())
	return s.Store.(dedup.TxAcceptor).AcceptTx(ctx, key, token, reply, fn)
}

// timedLedger observes the latency of the business ledger calls.
type timedLedger struct {
	dedup.Ledger
	m *metrics.Metrics
}

func (l timedLedger) ClaimInterchange(ctx context.Context, c dedup.InterchangeClaim) (dedup.Decision, error) {
	defer l.observe("claim_interchange", time.Now())
	return l.Ledger.ClaimInterchange(ctx, c)
}

func (l timedLedger) AcceptInterchange(ctx context.Context, key dedup.Key, token dedup.Token) error {
	defer l.observe("accept_interchange", time.Now())
	return l.Ledger.AcceptInterchange(ctx, key, token)
}

func (l timedLedger) AbandonInterchange(ctx context.Context, key dedup.Key, token dedup.Token) error {
	defer l.observe("abandon_interchange", time.Now())
	return l.Ledger.AbandonInterchange(ctx, key, token)
}

func (l timedLedger) observe(op string, start time.Time) { l.m.StoreOp(op, time.Since(start)) }

// countedOutbox counts the asynchronous MDN delivery attempts.
type countedOutbox struct {
	outbox.Store
	m *metrics.Metrics
}

func (o countedOutbox) Delivered(ctx context.Context, id, token string) error {
	err := o.Store.Delivered(ctx, id, token)
	if err == nil {
		o.m.OutboxAttempt("delivered")
	}
	return err
}

func (o countedOutbox) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	err := o.Store.Retry(ctx, id, token, next, lastErr)
	if err == nil {
		o.m.OutboxAttempt("retry")
	}
	return err
}

func (o countedOutbox) GiveUp(ctx context.Context, id, token string, lastErr string) error {
	err := o.Store.GiveUp(ctx, id, token, lastErr)
	if err == nil {
		o.m.OutboxAttempt("gave_up")
	}
	return err
}

// countedOutbound counts the outbound messages that reach a final state
// (gateway_outbound_final_total), whoever ends them: the Sender
// (Delivered, Failed), an asynchronous MDN (Settle) or an operator
// (Cancel). The Sender's attempts are counted by its Observer
// (*metrics.Metrics).
type countedOutbound struct {
	outbound.Store
	m *metrics.Metrics
}

func (o countedOutbound) Delivered(ctx context.Context, id, token string, ev *outbound.Evidence) error {
	err := o.Store.Delivered(ctx, id, token, ev)
	if err == nil {
		o.final(ctx, id, outbound.Delivered)
	}
	return err
}

func (o countedOutbound) Failed(ctx context.Context, id, token, reason string, ev *outbound.Evidence) error {
	err := o.Store.Failed(ctx, id, token, reason, ev)
	if err == nil {
		o.final(ctx, id, outbound.Failed)
	}
	return err
}

func (o countedOutbound) Cancel(ctx context.Context, id, reason string) error {
	err := o.Store.Cancel(ctx, id, reason)
	if err == nil {
		o.final(ctx, id, outbound.Cancelled)
	}
	return err
}

func (o countedOutbound) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string, ev *outbound.Evidence) (outbound.Message, bool, error) {
	m, changed, err := o.Store.Settle(ctx, partner, messageID, delivered, reason, ev)
	if err == nil && changed {
		o.m.OutboundFinal(m.Partner, m.Protocol, m.State)
	}
	return m, changed, err
}

// final counts message id ended in state st; its partner and protocol are
// read back (a message whose read fails is not counted).
func (o countedOutbound) final(ctx context.Context, id string, st outbound.State) {
	if m, err := o.Store.Get(ctx, id); err == nil {
		o.m.OutboundFinal(m.Partner, m.Protocol, st)
	}
}

// outboundStore is the store's outbound queue, counted for the metrics
// (countedOutbound); nil when the store has none. The console, the Sender
// and the asynchronous MDN receiver should all use it, so that every
// final state is counted once.
func (s *Server) outboundStore() outbound.Store {
	b, ok := s.Backend.(interface{ Outbound() outbound.Store })
	if !ok {
		return nil
	}
	ob := b.Outbound()
	if ob == nil {
		return nil
	}
	return countedOutbound{Store: ob, m: s.Metrics}
}

// instrumentHTTP measures one protocol endpoint: latency by status code,
// request body bytes read and requests in flight.
func instrumentHTTP(m *metrics.Metrics, protocol string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := m.Request(protocol)
		body := &countingBody{ReadCloser: r.Body}
		// A shallow copy: net/http judges how to close the connection by the
		// original request's body (an unread body refused early gets a
		// lingering close, not a reset that loses the answer).
		r2 := *r
		r2.Body = body
		r = &r2
		sw := &statusWriter{ResponseWriter: w}
		defer func() { done(sw.code(), body.n) }()
		h.ServeHTTP(sw, r)
	})
}

type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushing).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// certificates lists every partner certificate and identity key of the
// configuration in force, for gateway_certificate_expiry_seconds.
func (s *Server) certificates() []metrics.Certificate {
	var out []metrics.Certificate
	for _, c := range s.Current().Certificates {
		out = append(out, metrics.Certificate{Partner: c.Partner, Kind: c.Use, Cert: c.Cert})
	}
	return out
}

// partnerIDs are the label values the metrics accept as partners.
func (s *Server) partnerIDs() []string {
	dir := s.Directory()
	ids := make([]string, 0, len(dir.Partners))
	for _, p := range dir.Partners {
		ids = append(ids, p.ID)
	}
	return ids
}

// RefreshMetrics tells the metrics about the current partner directory (the
// partner label values); reloads call it.
func (s *Server) RefreshMetrics() { s.Metrics.SetPartners(s.partnerIDs()) }

// startMetrics exports what is read at scrape time (certificates, outbox,
// outbound queue)
// and counts reloads by result, refreshing the partner labels after each.
func (s *Server) startMetrics() {
	s.Metrics.SetLogger(s.Log)
	s.RefreshMetrics()
	s.Metrics.WatchCertificates(s.certificates)
	s.Metrics.Registry.MustRegister(&s.conns)
	if st := s.outboxStats(s.Backend.Outbox()); st != nil {
		s.Metrics.WatchOutbox(st)
	}
	s.watchOutbound()
	s.OnReload(func(st ReloadStatus) {
		s.Metrics.ConfigReload(st.OK)
		if st.OK {
			s.RefreshMetrics()
		}
	})
}

// watchOutbound exports the outbound queue's figures, read at scrape
// bounded by the readiness timeout (nothing when the store has no queue).
func (s *Server) watchOutbound() {
	if ob := s.outboundStore(); ob != nil {
		s.Metrics.WatchOutbound(func() ([]outbound.Stats, error) {
			ctx, cancel := context.WithTimeout(context.Background(), s.Config.Admin.ReadyTimeout)
			defer cancel()
			return ob.Stats(ctx)
		})
	}
}

// outboxStats reads the outbox queue for the metrics, bounded by the
// readiness timeout.
func (s *Server) outboxStats(ob outbox.Store) metrics.OutboxStats {
	pc, ok := ob.(outbox.PendingCounter)
	if !ok {
		return nil
	}
	return func() (int, time.Time, error) {
		ctx, cancel := context.WithTimeout(context.Background(), s.Config.Admin.ReadyTimeout)
		defer cancel()
		return pc.Pending(ctx)
	}
}
