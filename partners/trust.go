package partners

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/trust"
)

// Trust is the trust model of an AS2 or AS4 agreement (inlined in both).
type Trust struct {
	// Model: "pinned" (default: the signer is one of the configured
	// certificates) or "ca" (the signer chains to ca_certificates and
	// matches certificate_subject; new certificates from the same CA need
	// no configuration change).
	Model string `yaml:"trust"`
	// CACertificates are the roots (PEM or DER files) of trust: ca.
	CACertificates []string `yaml:"ca_certificates"`
	// Intermediates complete chains; intermediates the message carries
	// (AS2 CMS certificates, AS4 BinarySecurityTokens) are used as well.
	Intermediates []string `yaml:"intermediates"`
	// CertificateSubject is the pattern the signer's certificate must match
	// (trust.MatchSubject): "CN=AS2 ACME*,O=ACME*", "SAN:*.acme.example" or
	// an exact common name. Empty: any certificate of the CA.
	CertificateSubject string `yaml:"certificate_subject"`
	// ExtendedKeyUsage the signer may carry (any, serverAuth, clientAuth,
	// emailProtection, codeSigning, timeStamping); empty accepts any.
	ExtendedKeyUsage []string `yaml:"extended_key_usage"`
	// PartyIDIsCN (AS4): the eb:From PartyId must equal the signer's CN.
	PartyIDIsCN bool `yaml:"party_id_is_cn"`
	// Revocation checking of the signer (trust: ca only).
	Revocation *Revocation `yaml:"revocation"`
}

// Revocation configures revocation checking.
type Revocation struct {
	Mode          string   `yaml:"mode"`   // off (default), crl, ocsp, both
	Policy        string   `yaml:"policy"` // hard (default), soft
	OCSPResponder string   `yaml:"ocsp_responder"`
	CRLURLs       []string `yaml:"crl_urls"`
}

var ekuNames = map[string]x509.ExtKeyUsage{
	"any": x509.ExtKeyUsageAny, "serverAuth": x509.ExtKeyUsageServerAuth, "clientAuth": x509.ExtKeyUsageClientAuth,
	"emailProtection": x509.ExtKeyUsageEmailProtection, "codeSigning": x509.ExtKeyUsageCodeSigning, "timeStamping": x509.ExtKeyUsageTimeStamping,
}

// CA reports whether the agreement uses trust: ca.
func (t *Trust) CA() bool { return t.Model == "ca" }

func (t *Trust) validate(section string, f func(field, format string, a ...any) error) error {
	var errs []error
	bad := func(field, format string, a ...any) { errs = append(errs, f(field, format, a...)) }
	switch t.Model {
	case "":
		t.Model = "pinned"
	case "pinned", "ca":
	default:
		bad(section+".trust", "%q is not one of pinned, ca", t.Model)
		return errors.Join(errs...)
	}
	if !t.CA() {
		for _, c := range []struct {
			field string
			set   bool
		}{{"ca_certificates", len(t.CACertificates) > 0}, {"intermediates", len(t.Intermediates) > 0},
			{"certificate_subject", t.CertificateSubject != ""}, {"extended_key_usage", len(t.ExtendedKeyUsage) > 0},
			{"party_id_is_cn", t.PartyIDIsCN}, {"revocation", t.Revocation != nil}} {
			if c.set {
				bad(section+"."+c.field, "needs trust: ca")
			}
		}
		return errors.Join(errs...)
	}
	if len(t.CACertificates) == 0 {
		bad(section+".ca_certificates", "trust: ca needs at least one CA certificate")
	}
	if p := t.CertificateSubject; p != "" && strings.Contains(p, "=") && !strings.HasPrefix(p, "SAN:") {
		if _, err := trust.ParseSubjectPattern(p); err != nil {
			bad(section+".certificate_subject", "%v", err)
		}
	}
	for i, e := range t.ExtendedKeyUsage {
		if _, ok := ekuNames[e]; !ok {
			bad(fmt.Sprintf("%s.extended_key_usage[%d]", section, i), "%q is not one of any, serverAuth, clientAuth, emailProtection, codeSigning, timeStamping", e)
		}
	}
	if section == "as2" && t.PartyIDIsCN {
		bad("as2.party_id_is_cn", "is an as4 setting")
	}
	if r := t.Revocation; r != nil {
		switch r.Mode {
		case "":
			r.Mode = trust.ModeOff
		case trust.ModeOff, trust.ModeCRL, trust.ModeOCSP, trust.ModeBoth:
		default:
			bad(section+".revocation.mode", "%q is not one of off, crl, ocsp, both", r.Mode)
		}
		switch r.Policy {
		case "":
			r.Policy = trust.PolicyHard
		case trust.PolicyHard, trust.PolicySoft:
		default:
			bad(section+".revocation.policy", "%q is not one of hard, soft", r.Policy)
		}
		urls := append([]string{}, r.CRLURLs...)
		if r.OCSPResponder != "" {
			urls = append(urls, r.OCSPResponder)
		}
		for _, raw := range urls {
			if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(section+".revocation", "%q is not an http(s) URL", raw)
			}
		}
	}
	return errors.Join(errs...)
}

// loadTrust reads the CA files of a trust: ca agreement into a policy;
// allowWeak is the section's allow_weak_keys (judged by the trust check
// before its verdict).
func (d *Directory) loadTrust(file, section string, t *Trust, allowWeak bool) (*trust.CAPolicy, error) {
	if !t.CA() {
		return nil, nil
	}
	roots, rerr := d.loadCerts(file, section+".ca_certificates", t.CACertificates, config.Password{})
	inter, ierr := d.loadCerts(file, section+".intermediates", t.Intermediates, config.Password{})
	if err := errors.Join(rerr, ierr); err != nil {
		return nil, err
	}
	if t.CertificateSubject == "" && !t.PartyIDIsCN {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %s.trust: ca without certificate_subject accepts a signature by any certificate its CAs issue as this partner's",
			file, section))
	}
	p := &trust.CAPolicy{Roots: roots, Intermediates: inter, Subject: t.CertificateSubject, Keys: trust.Policy{AllowWeakKeys: allowWeak}}
	for _, e := range t.ExtendedKeyUsage {
		p.ExtKeyUsages = append(p.ExtKeyUsages, ekuNames[e])
	}
	if r := t.Revocation; r != nil {
		p.Revocation = trust.Revocation{Mode: r.Mode, Policy: r.Policy, OCSPResponder: r.OCSPResponder, CRLURLs: r.CRLURLs}
	}
	return p, nil
}

// AS2Trust is the CA trust policy of a trust: ca AS2 agreement; nil for
// pinned certificates.
func (d *Directory) AS2Trust(p *Partner) *trust.CAPolicy { return d.policies["as2\x00"+p.ID] }

// SignerPolicy is the CA trust policy of partner's use ("as2" or "as4")
// under trust: ca, nil for pinned certificates or an unknown partner
// (certs.CAPolicies).
func (d *Directory) SignerPolicy(partner, use string) *trust.CAPolicy {
	return d.policies[use+"\x00"+partner]
}

// AS4Trust is the CA trust policy of a trust: ca AS4 agreement; nil for
// pinned certificates.
func (d *Directory) AS4Trust(p *Partner) *trust.CAPolicy { return d.policies["as4\x00"+p.ID] }
