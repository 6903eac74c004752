package partners

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edigateway/gateway/internal/brainpool"
)

// ProfileBDEW is the as4.profile value of the BDEW AS4 profile (German
// energy market communication).
const ProfileBDEW = "bdew"

// Party id types of the BDEW AS4 profile: GLN (GS1, ISO 6523 ICD 0088),
// BDEW and DVGW codes; all are 13 digits.
const (
	PartyTypeGLN  = "urn:oasis:names:tc:ebcore:partyid-type:iso6523:0088"
	PartyTypeBDEW = "urn:oasis:names:tc:ebcore:partyid-type:unregistered:BDEW"
	PartyTypeDVGW = "urn:oasis:names:tc:ebcore:partyid-type:unregistered:DVGW"
)

// BDEWAgreement is the eb:AgreementRef of BDEW AS4 market communication.
const BDEWAgreement = "https://www.bdew.de/as4/communication/agreement"

// BDEWRetryPeriod is how long a BDEW AS4 sender retransmits; the dedup
// window of a bdew partner covers at least this.
const BDEWRetryPeriod = 72 * time.Hour

var marketPartnerID = regexp.MustCompile(`^[0-9]{13}$`)

// presentKeys returns the keys written in the mapping at path (top-level
// keys first: "as2", "send", "retry") of a YAML document (nil if it has
// none), so that a profile or a secure default can tell a field set to its
// zero value from one left out.
func presentKeys(doc []byte, path ...string) map[string]bool {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(doc)).Decode(&root); err != nil || len(root.Content) == 0 {
		return nil
	}
	n := root.Content[0]
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	keys := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys[n.Content[i].Value] = true
	}
	return keys
}

// applyProfile enforces the security floor of a.Profile and fills in its
// defaults. A field that would relax the floor fails the file.
func (a *AS4) applyProfile(f func(field, format string, args ...any) error) error {
	switch a.Profile {
	case "":
		return nil
	case ProfileBDEW:
	default:
		return f("as4.profile", "%q is not a known profile (bdew)", a.Profile)
	}
	var errs []error
	bad := func(field, format string, args ...any) { errs = append(errs, f(field, format, args...)) }
	if a.set["require_encryption"] && !a.RequireEncryption {
		bad("as4.require_encryption", "the bdew profile requires encrypted messages; remove the field or set it to true")
	}
	a.RequireEncryption = true
	switch a.PartyType {
	case "":
		a.PartyType = PartyTypeGLN
	case PartyTypeGLN, PartyTypeBDEW, PartyTypeDVGW:
	default:
		bad("as4.party_type", "%q is not a BDEW AS4 party id type (%s, %s or %s)", a.PartyType, PartyTypeGLN, PartyTypeBDEW, PartyTypeDVGW)
	}
	if len(a.TLSCertificates) == 0 {
		bad("as4.tls_certificates", "the bdew profile requires mutual TLS; list the partner's TLS client certificate(s)")
	}
	if !marketPartnerID.MatchString(a.PartyID) {
		bad("as4.party_id", "%q is not a 13-digit market partner id (GLN, BDEW or DVGW code)", a.PartyID)
	}
	if a.RetryWindow == 0 {
		a.RetryWindow = Duration(BDEWRetryPeriod)
	}
	switch {
	case a.set["dedup_window"] && a.DedupWindow.Std() < BDEWRetryPeriod:
		bad("as4.dedup_window", "%s is shorter than the %s the BDEW AS4 profile's senders retry", a.DedupWindow.Std(), BDEWRetryPeriod)
	case a.DedupWindow.Std() < a.RetryWindow.Std() && a.set["dedup_window"]:
		bad("as4.dedup_window", "%s is shorter than as4.retry_window %s", a.DedupWindow.Std(), a.RetryWindow.Std())
	}
	return errors.Join(errs...)
}

// IsBDEW reports whether the partner's AS4 agreement follows the BDEW AS4 profile.
func (a *AS4) IsBDEW() bool { return a != nil && a.Profile == ProfileBDEW }

// checkProfileCertificates refuses signing certificates the profile does not
// admit: a bdew partner signs with ECDSA on brainpoolP256r1.
func (a *AS4) checkProfileCertificates(certs []*x509.Certificate) error {
	if !a.IsBDEW() {
		return nil
	}
	for _, c := range certs {
		if _, ok := c.PublicKey.(*brainpool.PublicKey); !ok {
			return fmt.Errorf("certificate %q has a %T key; the bdew profile signs with brainpoolP256r1", c.Subject.String(), c.PublicKey)
		}
	}
	return nil
}
