package transmit

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/retryafter"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/receipt"
)

// ProfileBDEW is AS4Settings.Profile of the BDEW AS4 profile (the partner
// directory's as4.profile value).
const ProfileBDEW = "bdew"

// AS4Settings are a partner's AS4 sending settings (one P-Mode).
type AS4Settings struct {
	// URL is the partner's AS4 endpoint.
	URL string
	// From is our party (empty Value: Identity.PartyID and PartyType), To
	// the partner's; their roles default to the ebMS initiator and
	// responder.
	From, To         as4.PartyID
	FromRole, ToRole string
	// The P-Mode's agreement, id, service and action (a message's own
	// Service and Action win).
	AgreementRef, AgreementType, PMode string
	Service, ServiceType, Action       string
	// Profile: "" or ProfileBDEW (brainpoolP256r1 keys, PKIPath token,
	// recipient by X509SKI, encryption and compression required, an empty
	// eb:ConversationId).
	Profile string
	// ReceiptSigners are the partner's certificates that may sign its
	// receipts and error signals.
	ReceiptSigners []*x509.Certificate
	// CA, for a partner under trust: ca, also accepts a signer the
	// answer carries (BinarySecurityToken, PKIPath) that the partner's CA
	// policy trusts (and judges a listed one by that policy too):
	// ReceiptSigners may then be empty.
	CA *CATrust
	// EncryptTo is the partner's encryption certificate; nil sends signed
	// only (an opt-out; the BDEW profile refuses it).
	EncryptTo *x509.Certificate
	// Compress gzips the payload before signing.
	Compress bool
	// ReceiptRequired: only a verified receipt delivers (the wiring's
	// default). Without it a 2xx answer that is no verified error signal
	// delivers too.
	ReceiptRequired bool
	// FilenameProperty names the part property that carries the message's
	// file name (empty: the name is not sent).
	FilenameProperty string
	AllowWeakKeys    bool
	TLS              TLS
	// Timeout bounds the whole request (default DefaultTimeout).
	Timeout time.Duration
}

// AS4 is the AS4 Transmitter (outbound.Transmitter).
type AS4 struct {
	id       func(partner string) (Identity, error)
	settings func(partner string) (*AS4Settings, error)
	spoolDir string
}

// NewAS4 returns the AS4 Transmitter: id is our identity towards a
// partner (the key that signs, eb:From), settings the partner's (both
// called at every attempt), spoolDir where messages are built (empty: the
// system's temporary directory).
func NewAS4(id func(partner string) (Identity, error), settings func(partner string) (*AS4Settings, error), spoolDir string) *AS4 {
	return &AS4{id: id, settings: settings, spoolDir: spoolDir}
}

var _ outbound.Transmitter = (*AS4)(nil)

// client is the as4/client Client of settings s.
func (t *AS4) client(s *AS4Settings, id Identity, hc *http.Client) (*client.Client, error) {
	if id.Cert == nil || id.Key == nil {
		return nil, errors.New("transmit: AS4 needs our signing certificate and key")
	}
	bdew := s.Profile == ProfileBDEW
	switch s.Profile {
	case "", ProfileBDEW:
	default:
		return nil, fmt.Errorf("transmit: unknown AS4 profile %q", s.Profile)
	}
	c := &client.Client{Signer: id.Key, Certificate: id.Cert, Chain: id.Chain, ReceiptSigners: s.ReceiptSigners,
		AllowWeakKeys: s.AllowWeakKeys, SpoolDir: t.spoolDir, HTTP: hc, PKIPath: bdew}
	if bdew {
		if _, ok := id.Key.(*brainpool.PrivateKey); !ok {
			return nil, fmt.Errorf("transmit: the BDEW profile signs with a brainpoolP256r1 key, not %T", id.Key)
		}
		if s.EncryptTo == nil {
			return nil, errors.New("transmit: the BDEW profile encrypts every message and the partner has no encryption certificate")
		}
		if _, ok := s.EncryptTo.PublicKey.(*brainpool.PublicKey); !ok {
			return nil, fmt.Errorf("transmit: the BDEW profile encrypts for a brainpoolP256r1 key, not %T", s.EncryptTo.PublicKey)
		}
	}
	if s.EncryptTo != nil {
		c.Encryption = &client.Encryption{Recipient: s.EncryptTo}
		if bdew {
			c.Encryption.KeyReference = xmlenc.ByX509SKI
		}
	}
	return c, nil
}

// message is the user message of m under settings s.
func (t *AS4) message(s *AS4Settings, id Identity, m outbound.Message, open func() (io.ReadCloser, error)) (*client.Message, error) {
	bdew := s.Profile == ProfileBDEW
	if bdew && m.ConversationID != "" {
		return nil, errors.New("the BDEW profile sends an empty eb:ConversationId and the message has one")
	}
	from := s.From
	if from.Value == "" {
		from = as4.PartyID{Value: id.PartyID, Type: id.PartyType}
	}
	msg := &client.Message{MessageID: m.MessageID, ConversationID: m.ConversationID, EmptyConversationID: bdew,
		From: from, To: s.To, FromRole: s.FromRole, ToRole: s.ToRole,
		AgreementRef: s.AgreementRef, AgreementType: s.AgreementType, PMode: s.PMode,
		Service: orDefault(m.Service, s.Service), ServiceType: s.ServiceType, Action: orDefault(m.Action, s.Action)}
	if m.Service != "" && m.Service != s.Service {
		msg.ServiceType = "" // the P-Mode's type belongs to its service
	}
	p := client.Payload{MimeType: orDefault(m.ContentType, "application/octet-stream"), Open: open, Size: m.Size,
		Compress: s.Compress || bdew}
	if s.FilenameProperty != "" && m.Filename != "" {
		p.Properties = append(p.Properties, as4.Property{Name: s.FilenameProperty, Value: m.Filename})
	}
	// The message's own part properties (the BDEW profile's BDEWDocumentType,
	// …), in their order after ours: they are in the eb:Messaging header,
	// which the signature covers whole. The queue refused MimeType and
	// CompressionType; the file-name property is ours when we write it.
	for _, mp := range m.Properties {
		if s.FilenameProperty != "" && m.Filename != "" && strings.EqualFold(mp.Name, s.FilenameProperty) {
			return nil, fmt.Errorf("the message's part property %q is the one the partner's settings write the file name in", mp.Name)
		}
		p.Properties = append(p.Properties, as4.Property{Name: mp.Name, Value: mp.Value})
	}
	msg.Payloads = []client.Payload{p}
	return msg, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Transmit makes one attempt at sending m (outbound.Transmitter).
func (t *AS4) Transmit(ctx context.Context, m outbound.Message, open func() (io.ReadCloser, error), posting func(digest string) error) outbound.Attempt {
	s, err := t.settings(m.Partner)
	if err != nil {
		return retry("not sent: the partner's AS4 settings: %v", err)
	}
	if s == nil {
		return retry("not sent: partner %q has no AS4 sending settings", m.Partner)
	}
	hc, err := httpClient(s.TLS, s.Timeout)
	if err != nil {
		return retry("not sent: %v", err)
	}
	defer hc.CloseIdleConnections()
	id, err := t.id(m.Partner)
	if err != nil {
		return retry("not sent: our identity for partner %q: %v", m.Partner, err)
	}
	c, err := t.client(s, id, hc)
	if err != nil {
		return retry("not sent: %v", err)
	}
	msg, err := t.message(s, id, m, open)
	if err != nil {
		return outbound.Attempt{Outcome: outbound.Refuse, Reason: "not sent: " + err.Error()}
	}
	out, err := c.Prepare(msg)
	if err != nil {
		return retry("not sent: building the message: %v", err)
	}
	defer out.Close()
	digest, err := EncodeReferences(out.References)
	if err != nil {
		return retry("not sent: %v", err)
	}
	if err := posting(digest); err != nil {
		return retry("not sent: recording the transmission: %v", err)
	}
	run := &signerRun{}
	c.VerifySigner = s.CA.verifySigner(ctx, run)
	resp, err := c.Post(ctx, s.URL, out)
	if resp == nil {
		return transportRetry(err, hc.Timeout)
	}
	return judgeAS4(s, run, m.Sent, resp, err)
}

// judgeAS4 turns the answer to a transmission into an Attempt; run is the
// CA trust check of the answer's signer (trust: ca partners).
func judgeAS4(s *AS4Settings, run *signerRun, sent []string, resp *client.Response, err error) outbound.Attempt {
	a := outbound.Attempt{Status: resp.Status, RetryAfter: retryafter.Parse(resp.RetryAfter, time.Now())}
	ev := &outbound.Evidence{ContentType: resp.ContentType, Body: resp.Body, Received: time.Now()}
	var se *receipt.SignalError
	switch {
	case err == nil:
		ev.Kind, ev.Disposition, ev.Signer = "receipt", "receipt", receiptSigner(resp, run)
		a.Outcome, a.Evidence = outbound.Deliver, ev
	case errors.As(err, &se):
		ev.Kind, ev.Signer = "error", receiptSigner(resp, run)
		var codes []string
		failure := false
		for _, e := range se.Errors {
			codes = append(codes, e.Code)
			failure = failure || !strings.EqualFold(e.Severity, as4.SeverityWarning)
		}
		ev.Disposition = strings.Join(codes, " ")
		a.Evidence = ev
		switch {
		case resp.Status >= 500:
			// A SOAP Receiver fault with HTTP 5xx: the partner could not
			// process the message now and asks for a retransmission (our
			// endpoint answers a failed handler so).
			a.Outcome, a.Reason = outbound.Retry, "not delivered: the partner could not process the message now (HTTP "+fmt.Sprint(resp.Status)+"): "+snippet([]byte(se.Error()))
		case failure:
			a.Outcome, a.Reason = outbound.Refuse, snippet([]byte(se.Error()))
		default:
			a.Outcome, a.Reason = outbound.Retry, "not delivered: the partner answered with warnings and no receipt: "+snippet([]byte(se.Error()))
		}
	case errors.Is(err, client.ErrNotCovered) && resp.Receipt != nil:
		ev.Kind, ev.Disposition = "receipt", "receipt"
		a.Evidence = ev
		// The partner's duplicate elimination answers a retransmission
		// with the receipt of the transmission it accepted: enough when
		// that transmission is one of ours.
		for _, d := range sent {
			refs, derr := DecodeReferences(d)
			if derr == nil && len(refs) > 0 && resp.Receipt.Covers(refs) == nil {
				ev.Signer = receiptSigner(resp, run)
				a.Outcome = outbound.Deliver
				return a
			}
		}
		a.Outcome, a.Reason = outbound.Retry, "not delivered: the receipt covers no transmission of the message: "+snippet([]byte(err.Error()))
	case errors.Is(err, client.ErrNoSignal):
		st, ok := statusAttempt(resp.Status, http.Header{"Retry-After": {resp.RetryAfter}}, resp.Body)
		if !ok {
			return st
		}
		a = st
		if s.ReceiptRequired {
			a.Outcome, a.Reason = outbound.Retry, fmt.Sprintf("not delivered: HTTP %d without a receipt: %s", resp.Status, snippet(resp.Body))
		} else {
			a.Outcome, a.Evidence = outbound.Deliver, &outbound.Evidence{Kind: "status", Disposition: fmt.Sprintf("HTTP %d (no receipt required)", resp.Status), Received: time.Now()}
		}
	case !s.ReceiptRequired && resp.Status >= 200 && resp.Status <= 299:
		a.Outcome, a.Evidence = outbound.Deliver, &outbound.Evidence{Kind: "status", Disposition: fmt.Sprintf("HTTP %d (no receipt required; the answer did not verify: %s)", resp.Status, snippet([]byte(err.Error()))), Received: time.Now()}
	case run.refused():
		// A signer the partner's CA policy refuses: unverifiable, as one
		// signed by another key.
		a.Outcome, a.Reason = outbound.Retry, "not delivered: the answer's signature verified, but "+run.refusal()
	case s.CA.active() && !run.ran && errors.Is(err, wssec.ErrUnknownSigner):
		// The signature names its signer by a key identifier (X509SKI,
		// issuer and serial, thumbprint) that matches no certificate the
		// answer carries and none listed: the CA policy has nothing to
		// judge, and an unverified answer is no receipt.
		a.Outcome, a.Reason = outbound.Retry, "not delivered: the answer's signer is neither a certificate the answer carries "+
			"(BinarySecurityToken) nor one of the partner's listed certificates, so its trust: ca policy has no certificate to judge "+
			"(list the partner's signing certificate if it names it by key identifier only): "+snippet([]byte(err.Error()))
	default:
		a.Outcome, a.Reason = outbound.Retry, "not delivered: "+snippet([]byte(err.Error()))
	}
	return a
}

// receiptSigner names the signer whose signature over the answer verified
// and, under trust: ca, the policy's decision.
func receiptSigner(resp *client.Response, run *signerRun) string {
	if resp.Signer == nil {
		return ""
	}
	return signerName(resp.Signer) + run.note()
}

// EncodeReferences is the digest of an AS4 transmission (Sent): "as4:"
// and the base64 of the JSON of the ds:References its signature made.
func EncodeReferences(refs []receipt.Reference) (string, error) {
	b, err := json.Marshal(refs)
	if err != nil {
		return "", fmt.Errorf("transmit: encoding the references: %w", err)
	}
	return "as4:" + base64.StdEncoding.EncodeToString(b), nil
}

// DecodeReferences reads a digest EncodeReferences made.
func DecodeReferences(digest string) ([]receipt.Reference, error) {
	rest, ok := strings.CutPrefix(digest, "as4:")
	if !ok {
		return nil, errors.New("transmit: not an AS4 transmission digest")
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("transmit: AS4 transmission digest: %w", err)
	}
	var refs []receipt.Reference
	if err := json.Unmarshal(b, &refs); err != nil {
		return nil, fmt.Errorf("transmit: AS4 transmission digest: %w", err)
	}
	return refs, nil
}
