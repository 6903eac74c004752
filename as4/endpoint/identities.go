package endpoint

import (
	"crypto"
	"crypto/x509"
	"fmt"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/xmlenc"
)

// Identity is one more party of ours (config identities[]) with its own
// key pairs: a message addressed to it (eb:To PartyId and type) gets
// receipts and error signals signed with its Keys[0] (or, when that key
// may not sign, its first key that may), and its keys are
// tried first for decryption. Config.PartyID, PartyType and Keys are the
// first identity.
type Identity struct {
	PartyID, PartyType string
	Keys               []KeyPair
}

// ownIdentity is an identity with its checked signing key.
type ownIdentity struct {
	Identity
	// signer and signerCert sign the identity's receipts and error
	// signals (for partners without a profile): Keys[0], unless its
	// certificate's key usage forbids signatures, then the first key that
	// may sign.
	signer     crypto.Signer
	signerCert *x509.Certificate
	// bdewKey is the identity's brainpoolP256r1 signing key for bdew
	// partners, if it has one.
	bdewKey *signingKey
}

// maySign reports whether the key usage of c allows signatures
// (digitalSignature or nonRepudiation); a certificate without the
// extension allows them (RFC 5280 §4.2.1.3).
func maySign(c *x509.Certificate) bool {
	return c.KeyUsage == 0 || c.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageContentCommitment) != 0
}

// newIdentity picks the key that signs the identity's signals: Keys[0] if
// it can (a crypto.Signer belonging to its certificate, whose key usage
// allows signatures), else the first key that can. A key-agreement-only
// key (keyUsage keyAgreement) listed first therefore never signs.
func newIdentity(id Identity, name string) (*ownIdentity, error) {
	if len(id.Keys) == 0 || id.Keys[0].Cert == nil {
		return nil, fmt.Errorf("as4 endpoint: %s: no key to sign receipts (Keys[0])", name)
	}
	for i, k := range id.Keys {
		if k.Cert == nil || k.Key == nil {
			return nil, fmt.Errorf("as4 endpoint: %s: Keys[%d] lacks certificate or key", name, i)
		}
	}
	var firstErr error
	for i, k := range id.Keys {
		signer, ok := k.Key.(crypto.Signer)
		if !ok {
			if firstErr == nil {
				firstErr = fmt.Errorf("as4 endpoint: %s: Keys[%d] (%s) cannot sign receipts; put a signing key first", name, i, k.Cert.Subject)
			}
			continue
		}
		pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
		if !ok || !pub.Equal(k.Cert.PublicKey) {
			if firstErr == nil {
				firstErr = fmt.Errorf("as4 endpoint: %s: Keys[%d] key does not belong to certificate %s", name, i, k.Cert.Subject)
			}
			continue
		}
		if !maySign(k.Cert) {
			if firstErr == nil {
				firstErr = fmt.Errorf("as4 endpoint: %s: Keys[%d] (%s) may not sign: its key usage lacks digitalSignature; list a signing key", name, i, k.Cert.Subject)
			}
			continue
		}
		return &ownIdentity{Identity: id, signer: signer, signerCert: k.Cert, bdewKey: bdewSigningKey(id.Keys)}, nil
	}
	return nil, firstErr
}

// identityFor is the identity eb:To names, else the first. It matches as
// P-Modes do (as4.Match): PartyId equal, and the type equal unless the
// identity has none; an identity with the exact type wins.
func (e *Endpoint) identityFor(to as4.Party) *ownIdentity {
	var loose *ownIdentity
	for _, pid := range to.PartyIDs {
		for _, id := range e.ids {
			if id.PartyID == "" || id.PartyID != pid.Value {
				continue
			}
			if id.PartyType == pid.Type {
				return id
			}
			if id.PartyType == "" && loose == nil {
				loose = id
			}
		}
	}
	if loose != nil {
		return loose
	}
	return e.ids[0]
}

// decryptionKeys are the keys of id first, then every other key of ours
// (a sender may still encrypt to another of our certificates).
func (e *Endpoint) decryptionKeys(id *ownIdentity) []xmlenc.KeyPair {
	out := append([]xmlenc.KeyPair(nil), id.Keys...)
	for _, o := range e.ids {
		if o == id {
			continue
		}
		for _, k := range o.Keys {
			dup := false
			for _, d := range out {
				if d.Cert.Equal(k.Cert) {
					dup = true
				}
			}
			if !dup {
				out = append(out, k)
			}
		}
	}
	return out
}
