package as2

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/trust"
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
	if errors.As(run.err, &te) {
		lvl = "refused"
	}
	x.lg.Info("as2 signer trust decision", "decision", rec.Decision, "trust", lvl, "detail", rec.Error)
}
