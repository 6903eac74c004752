package client

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/receipt"
)

// ErrNotCovered reports a verified receipt for our eb:MessageId whose
// NonRepudiationInformation does not list the references of this
// transmission. The usual cause is duplicate elimination: the message was
// rebuilt (new signature) under an eb:MessageId the receiver had accepted
// before, and the receiver answered with the receipt of that earlier
// transmission, byte for byte. VerifyReceipt returns the receipt with this
// error; the caller decides whether the earlier receipt is enough.
var ErrNotCovered = errors.New("as4 client: the receipt does not cover this transmission")

// ReceiptCheck says what a receipt must satisfy.
type ReceiptCheck struct {
	// Trusted are the certificates that may sign the receipt (the
	// receiver's). The signature must cover eb:Messaging and soap:Body.
	Trusted []*x509.Certificate
	// MessageID, when set, must be the receipt's eb:RefToMessageId.
	MessageID string
	// References are the ds:References of the message we sent; the
	// receipt's NonRepudiationInformation must list every one of them.
	References []receipt.Reference
	// Now and ClockSkew check the receipt's wsu:Timestamp, if it has one;
	// Now is also the time the signer's certificate must be valid at.
	Now       func() time.Time
	ClockSkew time.Duration
	// Limits bound the parsing of the answer (as4 defaults when zero).
	Limits as4.Limits
	// AllowWeakKeys accepts a receipt signer with an RSA key of 1024 to
	// 2047 bits (the partner's as4.allow_weak_keys).
	AllowWeakKeys bool
	// CheckSigner, when set, turns on CA trust (Client.VerifySigner): a
	// certificate of the answer's BinarySecurityTokens may be the signer
	// too, accepted only if CheckSigner accepts it after the signature
	// verified; Trusted may then be empty.
	CheckSigner func(signer *x509.Certificate, presented []*x509.Certificate) error
}

// VerifyReceipt checks a synchronous AS4 answer (body with its
// Content-Type: a SOAP envelope or multipart/related): the WS-Security
// signature must verify against chk.Trusted (or, with chk.CheckSigner, a
// token certificate it accepts) and cover eb:Messaging and soap:Body, and the verified header must hold a receipt for
// chk.MessageID that acknowledges every reference in chk.References.
// A correctly signed error signal gives an error wrapping
// *receipt.SignalError; a valid receipt that does not list every reference
// is returned together with an error wrapping ErrNotCovered (and carrying
// EBMS:0302 InvalidReceipt).
func VerifyReceipt(contentType string, body []byte, chk ReceiptCheck) (*receipt.Receipt, error) {
	r, _, err := verifyReceipt(contentType, body, chk)
	return r, err
}

// verifyReceipt is VerifyReceipt that also returns the certificate whose
// signature verified (with a receipt, an error signal or ErrNotCovered).
func verifyReceipt(contentType string, body []byte, chk ReceiptCheck) (*receipt.Receipt, *x509.Certificate, error) {
	if len(chk.Trusted) == 0 && chk.CheckSigner == nil {
		return nil, nil, errors.New("as4 client: no certificate to verify the receipt with")
	}
	env, err := as4.ReadMessage(contentType, bytes.NewReader(body), chk.Limits)
	if err != nil {
		return nil, nil, fmt.Errorf("as4 client: reading the answer: %w", err)
	}
	defer env.Close()
	atts := make([]wssec.Attachment, len(env.Attachments))
	for i, a := range env.Attachments {
		atts[i] = wssec.Attachment{ContentID: a.ContentID, Header: a.Header, Body: a.Body, Open: a.Content}
	}
	vopts := wssec.VerifyOptions{
		Trusted: chk.Trusted, Now: chk.Now, ClockSkew: chk.ClockSkew, MinRSABits: trust.WeakRSAFloor,
	}
	if chk.CheckSigner != nil {
		vopts.CheckSigner = func(si wssec.SignerInfo) error { return chk.CheckSigner(si.Cert, si.Presented) }
	}
	res, err := wssec.Verify(env.Doc, atts, vopts)
	if err != nil {
		// Say what the unverified answer claims to be, without trusting it.
		var se *receipt.SignalError
		if _, perr := receipt.ParseReceipt(env.Doc); errors.As(perr, &se) {
			return nil, nil, fmt.Errorf("as4 client: the answer's signature is not valid (%w); unverified content: %s", err, se.Error())
		}
		return nil, nil, fmt.Errorf("as4 client: the answer's signature is not valid: %w", err)
	}
	// The same judgement of the signer's certificate as the endpoint's.
	now := time.Now()
	if chk.Now != nil {
		now = chk.Now()
	}
	if err := trust.CheckSigner(res.Signer, now, trust.Policy{AllowWeakKeys: chk.AllowWeakKeys}); err != nil {
		return nil, nil, fmt.Errorf("as4 client: the answer's signer is not acceptable: %w", as4.FailedAuthentication("the signer's "+err.Error(), err))
	}
	r, err := receipt.ParseReceipt(env.Doc)
	if err != nil {
		return nil, res.Signer, fmt.Errorf("as4 client: %w", err)
	}
	if r.Signal == nil || r.Signal.Element == nil || r.Signal.Element.Parent() != res.Messaging {
		return nil, res.Signer, as4.InvalidReceipt("the receipt is not in the signed eb:Messaging header", nil)
	}
	if chk.MessageID != "" && r.RefToMessageID != chk.MessageID {
		return nil, res.Signer, as4.InvalidReceipt(fmt.Sprintf("the receipt refers to %q, not to our message %q", r.RefToMessageID, chk.MessageID), nil)
	}
	if err := r.Covers(chk.References); err != nil {
		return r, res.Signer, fmt.Errorf("%w: %w", ErrNotCovered, err)
	}
	return r, res.Signer, nil
}
