package endpoint

import (
	"crypto"
	"fmt"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/xmlenc"
)

// Identity is one more party of ours (config identities[]) with its own
// key pairs: a message addressed to it (eb:To PartyId and type) gets
// receipts and error signals signed with its Keys[0], and its keys are
// tried first for decryption. Config.PartyID, PartyType and Keys are the
// first identity.
type Identity struct {
	PartyID, PartyType string
	Keys               []xmlenc.KeyPair
}

// ownIdentity is an identity with its checked signing key.
type ownIdentity struct {
	Identity
	signer crypto.Signer
	// bdewKey is the identity's brainpoolP256r1 signing key for bdew
	// partners, if it has one.
	bdewKey *signingKey
}

// newIdentity checks that keys[0] can sign and belongs to its certificate.
func newIdentity(id Identity, name string) (*ownIdentity, error) {
	if len(id.Keys) == 0 || id.Keys[0].Cert == nil {
		return nil, fmt.Errorf("as4 endpoint: %s: no key to sign receipts (Keys[0])", name)
	}
	signer, ok := id.Keys[0].Key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("as4 endpoint: %s: Keys[0] (%s) cannot sign receipts; put a signing key first", name, id.Keys[0].Cert.Subject)
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(id.Keys[0].Cert.PublicKey) {
		return nil, fmt.Errorf("as4 endpoint: %s: Keys[0] key does not belong to certificate %s", name, id.Keys[0].Cert.Subject)
	}
	for i, k := range id.Keys {
		if k.Cert == nil || k.Key == nil {
			return nil, fmt.Errorf("as4 endpoint: %s: Keys[%d] lacks certificate or key", name, i)
		}
	}
	return &ownIdentity{Identity: id, signer: signer, bdewKey: bdewSigningKey(id.Keys)}, nil
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
