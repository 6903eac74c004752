package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/partners"
)

// trustRun is the outcome of the CA trust check of one message's signer,
// kept for its audit record.
type trustRun struct {
	ran      bool
	info     wssec.SignerInfo
	decision *trust.Decision
	err      error
}

// signerCheck is the wssec callback of a trust: ca partner: the signer must
// chain to the partner's CA, match certificate_subject, carry the eb:From
// PartyId as its CN when party_id_is_cn is set, and not be revoked.
func (e *Endpoint) signerCheck(ctx context.Context, pol *trust.CAPolicy, t *partners.Trust, from as4.PartyID, run *trustRun, requireDirect bool) func(wssec.SignerInfo) error {
	return func(si wssec.SignerInfo) error {
		run.ran, run.info = true, si
		if requireDirect && !si.DirectReference {
			run.err = &trust.Error{Cert: si.Cert, Status: trust.StatusNotChecked, Err: trust.ErrUntrusted,
				Reason: fmt.Sprintf("the signer's certificate %s is not referenced as a wsse:BinarySecurityToken (the Peppol AS4 profile requires it)",
					trust.Describe(si.Cert))}
			return run.err
		}
		if t != nil && t.PartyIDIsCN && si.Cert.Subject.CommonName != from.Value {
			run.err = &trust.Error{Cert: si.Cert, Status: trust.StatusNotChecked, Err: trust.ErrUntrusted,
				Reason: fmt.Sprintf("the signer's certificate %s has common name %q, not the eb:From PartyId %q",
					trust.Describe(si.Cert), si.Cert.Subject.CommonName, from.Value)}
			return run.err
		}
		run.decision, run.err = e.trust.Check(ctx, pol, si.Cert, si.Presented)
		return run.err
	}
}

// trustUnavailable answers a message whose signer's revocation status
// could not be had right now (trust.ErrUnavailable under a hard policy):
// 503 with Retry-After and no eb:Error, as for other temporary failures,
// so that the sender retries (an EBMS:0101 failure is not retried);
// nothing was claimed, so the retransmission is processed as new. The
// reply record is "unavailable" (http-503).
func trustUnavailable(tr *trace, err error) exchange.Reply {
	why := "the revocation status of the signer's certificate cannot be checked right now"
	var te *trust.Error
	if errors.As(err, &te) {
		why = te.PartnerReason()
	}
	tr.incident = exchange.NewIncident()
	tr.err = as4.Other(why, err)
	tr.unavailable = true
	return exchange.Reply{Status: http.StatusServiceUnavailable, Disposition: "http-503", Incident: tr.incident,
		Header: http.Header{"Retry-After": {strconv.Itoa(int(trust.RetryAfter / time.Second))}, "Content-Type": {"text/plain; charset=utf-8"}},
		Body:   []byte("message not processed (" + why + "; " + exchange.IncidentNote(tr.incident) + "); retry later\n")}
}

// auditTrust records the trust decision of a message.
func (e *Endpoint) auditTrust(ctx context.Context, tr *trace, run *trustRun) {
	if run == nil || !run.ran {
		return
	}
	rec := audit.Record{Time: e.cfg.Now().UTC(), Step: audit.StepTrust, Partner: tr.partner, Protocol: string(exchange.AS4),
		MessageID: tr.messageID, Key: string(tr.key)}
	rec.Decision, rec.Error = trust.AuditDecision(run.info.Cert, run.decision, run.err)
	if a := e.cfg.Pipeline.Audit; a != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := a.Write(actx, rec); err != nil {
			e.log.Error("audit write failed", "partner", tr.partner, "message_id", tr.messageID, "err", err)
		}
	}
	e.log.Info("as4 signer trust decision", "partner", tr.partner, "protocol", string(exchange.AS4), "message_id", tr.messageID,
		"decision", rec.Decision, "detail", rec.Error)
}
