package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/receipt"
)

// replies builds the AS4 replies of one verified user message for the
// pipeline.
type replies struct {
	e    *Endpoint
	um   *as4.UserMessage
	refs []receipt.Reference
	// id is the identity the message is addressed to; it signs.
	id   *ownIdentity
	bdew bool // the partner follows the BDEW AS4 profile
}

// Accepted returns the signed receipt; the pipeline stores it.
func (r *replies) Accepted(ctx context.Context) (exchange.Reply, error) {
	return r.e.receiptReply(r.um, r.refs, r.id, r.bdew)
}

// Duplicate replays the receipt sent the first time, byte for byte.
func (r *replies) Duplicate(ctx context.Context, stored exchange.Reply, d dedup.Decision) (exchange.Reply, error) {
	return stored, nil
}

// Failed answers every exchange.FailureKind with a signed EBMS:0004 Other
// (severity failure) whose eb:Description says what happened (not the
// code's generic "Another error occurred."; for drift and a damaged business
// envelope the reason AS2's negative MDN gives) and whose eb:ErrorDetail
// gives the same sentence with the incident reference. A handler failure is
// retryable (HTTP 500, SOAP Receiver fault), so the partner retransmits;
// drift, quarantine and a damaged business envelope are permanent (HTTP
// 200), so it stops: the same bytes would be refused again. EBMS:0004
// because ebMS 3 Core §6.7 has no code for the business document itself
// (0003 and 0011 are about the ebMS header and payload references, 0303
// about decompression), and phase4 too answers errors of the business side
// with EBMS:0004.
func (r *replies) Failed(ctx context.Context, f *exchange.Failure) (exchange.Reply, error) {
	id := r.um.MessageInfo.MessageID
	note := " (" + exchange.IncidentNote(f.Incident) + ")"
	var detail string
	retryable := false
	switch f.Kind {
	case exchange.HandlerFailed:
		detail, retryable = "the message was not delivered to the business application and is not acknowledged; retransmit it", true
	case exchange.Drift, exchange.Quarantined:
		detail = "the message was not processed: " + f.Reason + "; a changed document needs a new eb:MessageId (and, for EDI, a new interchange reference)"
	case exchange.Damaged:
		detail = "the message was not processed: " + exchange.DamagedText(f.Reason)
	default:
		return exchange.Reply{}, fmt.Errorf("as4 endpoint: no ebMS error for failure kind %s", f.Kind)
	}
	ae := as4.Other(truncate(detail)+note, f.Err).WithRef(id)
	ae.Description = truncate(strings.ToUpper(detail[:1]) + detail[1:] + ".")
	return r.e.signalError(ae, id, retryable, r.id, r.bdew)
}

// receiptReply builds the receipt of um, signed by id (for a bdew partner
// with id's brainpool signing key).
func (e *Endpoint) receiptReply(um *as4.UserMessage, refs []receipt.Reference, id *ownIdentity, bdew bool) (exchange.Reply, error) {
	sig, err := receipt.BuildReceipt(um, refs, receipt.Options{Now: e.cfg.Now, Host: e.cfg.Host})
	if err != nil {
		return exchange.Reply{}, fmt.Errorf("as4 endpoint: receipt: %w", err)
	}
	body, err := e.sign(sig.Doc, id, bdew)
	if err != nil {
		return exchange.Reply{}, fmt.Errorf("as4 endpoint: receipt: %w", err)
	}
	return exchange.Reply{
		Status:      http.StatusOK,
		Header:      http.Header{"Content-Type": {SOAPContentType}},
		Body:        body,
		Disposition: "receipt",
	}, nil
}

// signalError builds an ebMS error signal signed by id (nil: our first
// identity; for a bdew partner its brainpool signing key). A retryable
// error is sent with HTTP 500 and a SOAP 1.2 env:Receiver fault in the body.
func (e *Endpoint) signalError(ae *as4.Error, refTo string, retryable bool, id *ownIdentity, bdew bool) (exchange.Reply, error) {
	sig, err := receipt.BuildError([]*as4.Error{ae}, refTo, receipt.Options{Now: e.cfg.Now, Host: e.cfg.Host})
	if err != nil {
		return exchange.Reply{}, fmt.Errorf("as4 endpoint: error signal: %w", err)
	}
	status := http.StatusOK
	if retryable {
		status = http.StatusInternalServerError
		if err := addReceiverFault(sig.Doc, ae.Detail); err != nil {
			return exchange.Reply{}, err
		}
	}
	body, err := e.sign(sig.Doc, id, bdew)
	if err != nil {
		return exchange.Reply{}, fmt.Errorf("as4 endpoint: error signal: %w", err)
	}
	return exchange.Reply{
		Status:      status,
		Header:      http.Header{"Content-Type": {SOAPContentType}},
		Body:        body,
		Disposition: ae.Code,
	}, nil
}

// addReceiverFault puts an env:Receiver fault in the SOAP 1.2 body.
func addReceiverFault(doc *etree.Document, reason string) error {
	root := doc.Root()
	bodies := as4.Children(root, as4.NSSOAP12, "Body")
	if len(bodies) != 1 {
		return errors.New("as4 endpoint: error signal without a SOAP 1.2 body")
	}
	p := root.Space
	fault := bodies[0].CreateElement(p + ":Fault")
	fault.CreateElement(p + ":Code").CreateElement(p + ":Value").SetText(p + ":Receiver")
	text := fault.CreateElement(p + ":Reason").CreateElement(p + ":Text")
	text.CreateAttr("xml:lang", "en")
	text.SetText(reason)
	return nil
}

// sign adds the WS-Security signature of identity id (nil: the first; for
// a bdew partner its brainpool signing key) to a signal and serialises it.
func (e *Endpoint) sign(doc *etree.Document, id *ownIdentity, bdew bool) ([]byte, error) {
	k, err := e.signingKeyFor(id, bdew)
	if err != nil {
		return nil, err
	}
	if err := wssec.Sign(doc, nil, wssec.SignOptions{Signer: k.signer, Certificate: k.cert, PKIPath: k.pkiPath, Now: e.cfg.Now}); err != nil {
		return nil, err
	}
	return doc.WriteToBytes()
}

// reject answers a message that failed before the pipeline with a signed
// error signal (HTTP 200: the error is permanent).
func (e *Endpoint) reject(tr *trace, ae *as4.Error, refTo string) exchange.Reply {
	if refTo != "" && ae.RefToMessageID == "" {
		ae = ae.WithRef(refTo)
	}
	if goErrorText.MatchString(ae.Detail) {
		// Never an error text of a Go package to the partner (the log and
		// the audit record keep ae.Err).
		if ae.Err == nil {
			ae.Err = errors.New(ae.Detail)
		}
		ae.Detail = partnerDetail(ae.Code, ae.Detail)
	}
	if d := stableDescription(ae.Code); d != "" {
		ae.Description = d
	}
	tr.incident = exchange.NewIncident()
	ae.Detail = strings.TrimSpace(ae.Detail + " (" + exchange.IncidentNote(tr.incident) + ")")
	tr.err = ae
	reply, err := e.signalError(ae, refTo, false, tr.id, tr.bdew)
	if err != nil {
		return e.internalError(tr, err)
	}
	return reply
}

// internalError is the answer when even a signal cannot be built.
func (e *Endpoint) internalError(tr *trace, err error) exchange.Reply {
	if tr.err == nil {
		tr.err = as4.Other("internal error", err)
	} else {
		tr.err.Err = errors.Join(tr.err.Err, err)
	}
	if tr.incident == "" {
		tr.incident = exchange.NewIncident()
	}
	return exchange.Reply{
		Status:      http.StatusInternalServerError,
		Header:      http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:        []byte("internal error; the message was not processed, please retransmit (" + exchange.IncidentNote(tr.incident) + ")\n"),
		Disposition: "http-500",
		Incident:    tr.incident,
	}
}

// receiptReferences copies the verified ds:References for the receipt.
func receiptReferences(refs []wssec.Reference) []receipt.Reference {
	out := make([]receipt.Reference, len(refs))
	for i, r := range refs {
		rr := receipt.Reference{URI: r.URI, DigestMethod: r.DigestMethod, DigestValue: r.DigestValue}
		for _, t := range r.Transforms {
			rr.Transforms = append(rr.Transforms, receipt.Transform{Algorithm: t.Algorithm, PrefixList: t.PrefixList})
		}
		out[i] = rr
	}
	return out
}
