package as2

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/trust"
)

// trustRun is the outcome of the CA trust check of one message's signer
// (trust: ca partners), kept for its audit record.
type trustRun struct {
	ran      bool
	cert     *x509.Certificate
	decision *trust.Decision
	err      error
}

// signerCheck is the cms callback of a trust: ca partner: the certificate
// that verified the signature must chain to the partner's CA, match its
// subject pattern and not be revoked.
func (e *Endpoint) signerCheck(ctx context.Context, pol *trust.CAPolicy, run *trustRun) func(*x509.Certificate, []*x509.Certificate) error {
	return func(signer *x509.Certificate, embedded []*x509.Certificate) error {
		d, err := e.trust.Check(ctx, pol, signer, embedded)
		run.ran, run.cert, run.decision, run.err = true, signer, d, err
		return err
	}
}

// trustUnavailable answers a message whose signer's revocation status
// could not be had right now (trust.ErrUnavailable under a hard policy):
// 503 with Retry-After, no MDN, so that the sender retries as it does for
// other temporary failures; nothing was claimed, so the retransmission is
// processed as new. The reply record is "unavailable" (http-503).
func (e *Endpoint) trustUnavailable(ctx context.Context, w http.ResponseWriter, x *inbound, err error) {
	incident := exchange.NewIncident()
	why := "the revocation status of the signer's certificate cannot be checked right now"
	var te *trust.Error
	if errors.As(err, &te) {
		why = te.PartnerReason()
	}
	if a := e.cfg.Pipeline.Audit; a != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		werr := a.Write(actx, audit.Record{Time: e.now().UTC(), Step: audit.StepReply, Partner: x.partner.ID, Protocol: "as2",
			MessageID: dedup.NormalizeMessageID(x.req.MessageID), Key: string(dedup.TransportKey("as2", "as2", x.req.From, x.req.MessageID)),
			Decision: "unavailable", Disposition: "http-503", Error: err.Error(), Incident: incident})
		cancel()
		if werr != nil {
			x.lg.Error("audit write failed", "err", werr)
		}
	}
	x.lg.Warn("as2 message not processed: the signer's revocation status is unavailable; the sender is asked to retry",
		"decision", "unavailable", "status", http.StatusServiceUnavailable, "reason", why, "incident", incident, "err", err)
	w.Header().Set("Retry-After", strconv.Itoa(int(trust.RetryAfter/time.Second)))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, "message not processed ("+why+"; "+exchange.IncidentNote(incident)+"); retry later\n")
}

// auditTrust records the trust decision of a message (accepted or refused).
func (e *Endpoint) auditTrust(ctx context.Context, x *inbound, run *trustRun) {
	if run == nil || !run.ran {
		return
	}
	rec := audit.Record{Time: e.now().UTC(), Step: audit.StepTrust, Partner: x.partner.ID, Protocol: "as2",
		MessageID: dedup.NormalizeMessageID(x.req.MessageID), Key: string(dedup.TransportKey("as2", "as2", x.req.From, x.req.MessageID))}
	rec.Decision, rec.Error = trust.AuditDecision(run.cert, run.decision, run.err)
	if a := e.cfg.Pipeline.Audit; a != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := a.Write(actx, rec); err != nil {
			x.lg.Error("audit write failed", "err", err)
		}
	}
	lvl := "trusted"
	var te *trust.Error
	switch {
	case errors.Is(run.err, trust.ErrUnavailable):
		lvl = "unavailable"
	case errors.As(run.err, &te):
		lvl = "refused"
	}
	x.lg.Info("as2 signer trust decision", "decision", rec.Decision, "trust", lvl, "detail", rec.Error)
}
