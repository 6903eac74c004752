package as2

import (
	"fmt"

	"github.com/edigateway/gateway/internal/cms"
)

// Identity is one more AS2 name of ours with its own key pairs (config
// identities[]): a partner addressing it (AS2-To, the partner file's
// our_as2_id) gets MDNs signed with its Keys[0], and its keys are tried
// first for decryption. Config.OurID and Config.Keys are the first identity.
type Identity struct {
	ID   string
	Keys []KeyPair
}

func checkIdentities(cfg Config) error {
	seen := map[string]bool{cfg.OurID: true}
	for i, id := range cfg.Identities {
		if id.ID == "" || seen[id.ID] {
			return fmt.Errorf("as2: config: Identities[%d]: AS2 name %q is empty or used twice", i, id.ID)
		}
		seen[id.ID] = true
		for j, k := range id.Keys {
			if k.Cert == nil || k.Key == nil {
				return fmt.Errorf("as2: config: Identities[%d].Keys[%d] lacks its certificate or private key", i, j)
			}
		}
	}
	return nil
}

// identityKeys returns the key pairs of the identity the partner addressed
// (to; the first identity when to names none of the others), which sign
// the MDN, and the decryption keys: those first, then every other key of
// ours (a partner may still encrypt to another of our certificates).
func (e *Endpoint) identityKeys(to string) (sign, decrypt []cms.KeyPair) {
	sign = e.cfg.Keys
	for _, id := range e.cfg.Identities {
		if id.ID == to {
			sign = id.Keys
		}
	}
	decrypt = append(decrypt, sign...)
	add := func(keys []cms.KeyPair) {
		for _, k := range keys {
			dup := false
			for _, d := range decrypt {
				if d.Cert.Equal(k.Cert) {
					dup = true
				}
			}
			if !dup {
				decrypt = append(decrypt, k)
			}
		}
	}
	add(e.cfg.Keys)
	for _, id := range e.cfg.Identities {
		add(id.Keys)
	}
	return sign, decrypt
}
