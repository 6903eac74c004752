package main

import (
	"crypto/sha1" // fingerprints: partners' tools show SHA-1 next to SHA-256
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
)

// partnerProfile is what a partner needs from us to set up their side of
// the agreement: our names, URLs and certificates, the security and
// algorithms we accept, and the MDN or receipt they get.
type partnerProfile struct {
	Partner string      `json:"partner"`
	Name    string      `json:"name,omitempty"`
	AS2     *as2Profile `json:"as2,omitempty"`
	AS4     *as4Profile `json:"as4,omitempty"`
}

type as2Profile struct {
	TheirAS2ID string `json:"their_as2_id"`
	OurAS2ID   string `json:"our_as2_id"`
	URL        string `json:"url"`
	// URLFromListen: no public_url is set, URL is derived from listen.
	URLFromListen     bool          `json:"url_from_listen,omitempty"`
	RequireSignature  bool          `json:"require_signature"`
	RequireEncryption bool          `json:"require_encryption"`
	Digests           []string      `json:"digests"`
	Ciphers           []string      `json:"ciphers"`
	KeyTransport      []string      `json:"key_transport"`
	MDN               mdnProfile    `json:"mdn"`
	Certificates      []certProfile `json:"certificates"`
}

type mdnProfile struct {
	// Modes are sync and async (async: Receipt-Delivery-Option).
	Modes []string `json:"modes"`
	// AsyncURLs are the patterns an async Receipt-Delivery-Option must
	// match; empty: only signed messages get one, and only to public
	// addresses.
	AsyncURLs []string `json:"async_urls,omitempty"`
	AsyncRule string   `json:"async_rule"`
	// Signed: signed when the partner's Disposition-Notification-Options
	// ask for it.
	Signed               string   `json:"signed"`
	MICAlgs              []string `json:"micalg"`
	DuplicateDisposition string   `json:"duplicate_disposition"`
}

type as4Profile struct {
	TheirPartyID      string        `json:"their_party_id"`
	TheirPartyType    string        `json:"their_party_type,omitempty"`
	OurPartyID        string        `json:"our_party_id"`
	OurPartyType      string        `json:"our_party_type,omitempty"`
	URL               string        `json:"url"`
	URLFromListen     bool          `json:"url_from_listen,omitempty"`
	Profile           string        `json:"profile,omitempty"`
	MutualTLS         bool          `json:"mutual_tls"`
	PModes            []pmodeInfo   `json:"pmodes"`
	RequireSignature  bool          `json:"require_signature"`
	RequireEncryption bool          `json:"require_encryption"`
	SignatureMethods  []string      `json:"signature_methods"`
	DigestMethods     []string      `json:"digest_methods"`
	ContentCiphers    []string      `json:"content_ciphers"`
	KeyTransport      []string      `json:"key_transport"`
	Receipt           receiptInfo   `json:"receipt"`
	Certificates      []certProfile `json:"certificates"`
	// SendingAs and SendingCertificates: the identity we send to the
	// partner as (as4.send.from_party_id), when it is not the one the
	// partner sends to: its certificates sign our messages.
	SendingAs           *partyInfo    `json:"sending_as,omitempty"`
	SendingCertificates []certProfile `json:"sending_certificates,omitempty"`
}

type partyInfo struct {
	ID   string `json:"party_id"`
	Type string `json:"party_type,omitempty"`
}

type pmodeInfo struct {
	ID          string `json:"id"`
	Agreement   string `json:"agreement,omitempty"`
	Service     string `json:"service,omitempty"`
	ServiceType string `json:"service_type,omitempty"`
	Action      string `json:"action,omitempty"`
	ToPartyID   string `json:"to_party_id,omitempty"`
	ToPartyType string `json:"to_party_type,omitempty"`
}

type receiptInfo struct {
	Reply          string `json:"reply"`
	Signed         bool   `json:"signed"`
	NonRepudiation bool   `json:"non_repudiation"`
}

type certProfile struct {
	// Use is what the certificate is for: the first of an identity's keys
	// signs our MDNs and receipts and is the one to encrypt to; the others
	// decrypt only (rollover).
	Use       string    `json:"use"`
	Subject   string    `json:"subject"`
	Issuer    string    `json:"issuer"`
	Serial    string    `json:"serial"`
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
	SHA256    string    `json:"sha256"`
	SHA1      string    `json:"sha1"`
	PEM       string    `json:"pem"`
}

// The algorithms the endpoints accept (cms and smime for AS2, wssec and
// xmlenc for AS4).
var (
	as2DefaultDigests = []string{"sha1", "sha224", "sha256", "sha384", "sha512"}
	as2DefaultCiphers = []string{"3des", "aes128-cbc", "aes192-cbc", "aes256-cbc", "aes128-gcm", "aes256-gcm"}
	as2KeyTransport   = []string{"rsaEncryption (PKCS#1 v1.5)", "RSAES-OAEP"}
	as4Signatures     = []string{"rsa-sha256", "rsa-sha384", "rsa-sha512", "ecdsa-sha256", "ecdsa-sha384", "ecdsa-sha512", "eddsa-ed25519"}
	as4Digests        = []string{"sha256", "sha384", "sha512"}
	as4Ciphers        = []string{"aes128-gcm", "aes192-gcm", "aes256-gcm", "aes128-cbc", "aes192-cbc", "aes256-cbc"}
	as4KeyTransport   = []string{"rsa-oaep-mgf1p", "rsa-oaep (xmlenc11)", "X25519 + HKDF + kw-aes (eDelivery AS4 2.0)", "ECDH-ES + ConcatKDF + kw-aes (BDEW)"}
)

// partnersProfile prints what a partner (or every partner) needs from us to
// configure their side.
func partnersProfile(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("partners profile", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	id := fs.String("partner", "", "the partner's id (default: every partner)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: partners profile takes no arguments, got %q", errUsage, fs.Args())
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	d, err := partners.Load(cfg.Partners)
	if err != nil {
		return err
	}
	var list []*partners.Partner
	var ids []string
	for _, p := range d.Partners {
		ids = append(ids, p.ID)
		if *id == "" || p.ID == *id {
			list = append(list, p)
		}
	}
	if *id != "" && len(list) == 0 {
		return fmt.Errorf("partners profile: no partner %q in %s (partners: %s)", *id, cfg.Partners, strings.Join(ids, ", "))
	}
	var out []partnerProfile
	for _, p := range list {
		pp, err := profileOf(cfg, p)
		if err != nil {
			return fmt.Errorf("partners profile: %s: %w", p.ID, err)
		}
		out = append(out, pp)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if *id != "" {
			return enc.Encode(out[0])
		}
		return enc.Encode(out)
	}
	for i, pp := range out {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		writeProfile(stdout, pp)
	}
	return nil
}

func profileOf(cfg *config.Config, p *partners.Partner) (partnerProfile, error) {
	pp := partnerProfile{Partner: p.ID, Name: p.Name}
	if a := p.AS2; a != nil {
		our := a.OurID
		if our == "" {
			our = cfg.Identity.AS2ID
		}
		url, derived, err := publicURL(cfg, cfg.AS2.Path)
		if err != nil {
			return pp, err
		}
		certs, err := identityCertificates(identityFor(cfg, func(id config.Identity) bool { return id.AS2ID == our }))
		if err != nil {
			return pp, err
		}
		digests := listOr(a.AllowedDigests, as2DefaultDigests)
		mdn := mdnProfile{Modes: []string{"sync", "async"}, AsyncURLs: a.AsyncMDNURLs,
			Signed:               "when the message's Disposition-Notification-Options ask for it (signed-receipt-protocol=optional, pkcs7-signature), with our signing certificate",
			MICAlgs:              digests,
			DuplicateDisposition: "processed/warning: duplicate-document",
		}
		if a.DuplicateDisposition == "processed" {
			mdn.DuplicateDisposition = "processed (no warning)"
		}
		if len(a.AsyncMDNURLs) > 0 {
			mdn.AsyncRule = "the Receipt-Delivery-Option must match one of async_urls"
		} else {
			mdn.AsyncRule = "only for messages signed by the partner, and only to public addresses"
		}
		pp.AS2 = &as2Profile{TheirAS2ID: a.ID, OurAS2ID: our, URL: url, URLFromListen: derived,
			RequireSignature: a.RequireSignature, RequireEncryption: a.RequireEncryption,
			Digests: digests, Ciphers: listOr(a.AllowedCiphers, as2DefaultCiphers), KeyTransport: as2KeyTransport,
			MDN: mdn, Certificates: certs}
	}
	if a := p.AS4; a != nil {
		ourID, ourType := cfg.Identity.PartyID, cfg.Identity.PartyType
		var pms []pmodeInfo
		for _, pm := range a.PModes {
			pms = append(pms, pmodeInfo(pm))
			if pm.ToPartyID != "" {
				ourID, ourType = pm.ToPartyID, pm.ToPartyType
			}
		}
		url, derived, err := publicURL(cfg, cfg.AS4.Path)
		if err != nil {
			return pp, err
		}
		certs, err := identityCertificates(identityFor(cfg, func(id config.Identity) bool { return id.PartyID == ourID && id.PartyType == ourType }))
		if err != nil {
			return pp, err
		}
		sigs, digests, ciphers, kt := as4Signatures, as4Digests, as4Ciphers, as4KeyTransport
		if a.IsBDEW() {
			sigs, digests, ciphers, kt = []string{"ecdsa-sha256 (brainpoolP256r1)"}, []string{"sha256"}, []string{"aes128-gcm"}, []string{"ECDH-ES + ConcatKDF + kw-aes128 (BDEW)"}
		}
		pp.AS4 = &as4Profile{TheirPartyID: a.PartyID, TheirPartyType: a.PartyType, OurPartyID: ourID, OurPartyType: ourType,
			URL: url, URLFromListen: derived, Profile: a.Profile, MutualTLS: len(a.TLSCertificates) > 0, PModes: pms,
			RequireSignature: true, RequireEncryption: a.RequireEncryption,
			SignatureMethods: sigs, DigestMethods: digests, ContentCiphers: ciphers, KeyTransport: kt,
			Receipt:      receiptInfo{Reply: "synchronous (on the HTTP response)", Signed: true, NonRepudiation: true},
			Certificates: certs}
		if a.Send != nil {
			ids := cfg.AllIdentities()
			if j := p.SendIdentity(outbound.AS4, ids); j >= 0 && (ids[j].PartyID != ourID || ids[j].PartyType != ourType) {
				sc, err := identityCertificates(ids[j])
				if err != nil {
					return pp, err
				}
				pp.AS4.SendingAs = &partyInfo{ID: ids[j].PartyID, Type: ids[j].PartyType}
				pp.AS4.SendingCertificates = sc
			}
		}
	}
	return pp, nil
}

func listOr(list, def []string) []string {
	if len(list) > 0 {
		return list
	}
	return def
}

// publicURL is public_url plus path, or else the URL listen gives
// (derived true).
func publicURL(cfg *config.Config, path string) (string, bool, error) {
	if cfg.PublicURL != "" {
		return strings.TrimSuffix(cfg.PublicURL, "/") + path, false, nil
	}
	u, err := gatewayURL(cfg, path)
	return u, true, err
}

// identityFor is the first of our identities match accepts, else the
// first identity.
func identityFor(cfg *config.Config, match func(config.Identity) bool) config.Identity {
	all := cfg.AllIdentities()
	for _, id := range all {
		if match(id) {
			return id
		}
	}
	if len(all) > 0 {
		return all[0]
	}
	return config.Identity{}
}

// identityCertificates are the certificates of an identity's keys, the
// first of which signs and is encrypted to.
func identityCertificates(id config.Identity) ([]certProfile, error) {
	var out []certProfile
	for i, k := range id.Keys {
		certs, err := keyCertificates(k)
		if err != nil {
			return nil, err
		}
		if len(certs) == 0 {
			return nil, errors.New(k.Field + ": no certificate")
		}
		use := "signs our MDNs and receipts; encrypt to this one"
		if i > 0 {
			use = "decrypts too (rollover): messages encrypted to it are still read"
		}
		out = append(out, certInfo(certs[0], use))
	}
	return out, nil
}

func certInfo(c *x509.Certificate, use string) certProfile {
	s256 := sha256.Sum256(c.Raw)
	s1 := sha1.Sum(c.Raw)
	return certProfile{Use: use, Subject: c.Subject.String(), Issuer: c.Issuer.String(), Serial: trust.Serial(c),
		NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(), SHA256: fingerprint(s256[:]), SHA1: fingerprint(s1[:]),
		PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))}
}

// fingerprint is openssl x509 -fingerprint's form: upper-case hex bytes
// joined by colons.
func fingerprint(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02X", x)
	}
	return strings.Join(parts, ":")
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func writeProfile(w io.Writer, pp partnerProfile) {
	title := "partner " + pp.Partner
	if pp.Name != "" {
		title += " (" + pp.Name + ")"
	}
	fmt.Fprintln(w, title)
	line := func(k, v string) { fmt.Fprintf(w, "  %-26s %s\n", k+":", v) }
	note := "  (from listen: set public_url to the address partners reach)"
	if a := pp.AS2; a != nil {
		fmt.Fprintln(w, "\nAS2")
		line("their AS2 id (AS2-From)", a.TheirAS2ID)
		line("our AS2 id (AS2-To)", a.OurAS2ID)
		line("URL", a.URL)
		if a.URLFromListen {
			fmt.Fprintln(w, note)
		}
		line("messages must be", yesNo(a.RequireSignature, "signed", "signed or unsigned")+", "+yesNo(a.RequireEncryption, "encrypted", "encrypted or not"))
		line("signature digests", strings.Join(a.Digests, ", "))
		line("content ciphers", strings.Join(a.Ciphers, ", "))
		line("key transport", strings.Join(a.KeyTransport, ", "))
		line("MDN", strings.Join(a.MDN.Modes, " or "))
		line("async MDN", a.MDN.AsyncRule)
		for _, u := range a.MDN.AsyncURLs {
			line("  async MDN URL", u)
		}
		line("signed MDN", a.MDN.Signed)
		line("MDN micalg", strings.Join(a.MDN.MICAlgs, ", "))
		line("duplicates are answered", a.MDN.DuplicateDisposition)
		writeCerts(w, a.Certificates)
	}
	if a := pp.AS4; a != nil {
		fmt.Fprintln(w, "\nAS4")
		line("their party (eb:From)", party(a.TheirPartyID, a.TheirPartyType))
		line("our party (eb:To)", party(a.OurPartyID, a.OurPartyType))
		line("URL", a.URL)
		if a.URLFromListen {
			fmt.Fprintln(w, note)
		}
		if a.Profile != "" {
			line("profile", a.Profile)
		}
		line("mutual TLS", yesNo(a.MutualTLS, "required (the partner's TLS client certificate)", "not required"))
		for _, pm := range a.PModes {
			v := fmt.Sprintf("service %s, action %s, agreement %s", orAny(party(pm.Service, pm.ServiceType)), orAny(pm.Action), orAny(pm.Agreement))
			if pm.ToPartyID != "" {
				v += ", to " + party(pm.ToPartyID, pm.ToPartyType)
			}
			line("P-Mode "+pm.ID, v)
		}
		line("messages must be", "signed, "+yesNo(a.RequireEncryption, "encrypted", "encrypted or not"))
		line("signature methods", strings.Join(a.SignatureMethods, ", "))
		line("digest methods", strings.Join(a.DigestMethods, ", "))
		line("content encryption", strings.Join(a.ContentCiphers, ", "))
		line("key transport", strings.Join(a.KeyTransport, ", "))
		line("receipt", fmt.Sprintf("%s, %s, %s", a.Receipt.Reply, yesNo(a.Receipt.Signed, "signed", "unsigned"),
			yesNo(a.Receipt.NonRepudiation, "with NonRepudiationInformation", "without NonRepudiationInformation")))
		writeCerts(w, a.Certificates)
		if a.SendingAs != nil {
			line("we send to you as (eb:From)", party(a.SendingAs.ID, a.SendingAs.Type))
			fmt.Fprintln(w, "  the certificates of that identity sign the messages we send you:")
			writeCerts(w, a.SendingCertificates)
		}
	}
}

func party(id, typ string) string {
	if typ == "" {
		return id
	}
	return id + " (type " + typ + ")"
}

func orAny(s string) string {
	if s == "" {
		return "(any)"
	}
	return s
}

func writeCerts(w io.Writer, certs []certProfile) {
	for i, c := range certs {
		fmt.Fprintf(w, "  our certificate %d: %s\n", i+1, c.Use)
		fmt.Fprintf(w, "    subject:  %s\n    issuer:   %s\n    serial:   %s\n    valid:    %s to %s\n    SHA-256:  %s\n    SHA-1:    %s\n",
			c.Subject, c.Issuer, c.Serial, c.NotBefore.Format(time.DateOnly), c.NotAfter.Format(time.DateOnly), c.SHA256, c.SHA1)
		for _, l := range strings.Split(strings.TrimSpace(c.PEM), "\n") {
			fmt.Fprintln(w, "    "+l)
		}
	}
}
