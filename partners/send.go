package partners

import (
	"crypto/x509"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/outbound"
)

// The sending settings of a partner: as2.send and as4.send. A section
// without send only receives. The fewest lines (send: {url: …}) are the
// secure set-up: AS2 signed (sha256) and encrypted (aes256-cbc) with a
// signed synchronous MDN, AS4 encrypted, compressed and with a signed
// receipt; every weaker setting is written down and warned about by
// partners check and at start and reload.

// SendNone is the value of as2.send.digest, cipher, compression and mdn that
// turns the feature off.
const SendNone = "none"

// as2.send.compression values besides SendNone (RFC 5402: compress the
// payload before signing it, or the signed entity after).
const (
	CompressBeforeSigning = "before-signing"
	CompressAfterSigning  = "after-signing"
)

// as2.send.mdn values besides SendNone.
const (
	MDNSync  = "sync"
	MDNAsync = "async"
)

// Defaults of the sending settings.
const (
	DefaultSendDigest      = "sha256"
	DefaultSendCipher      = "aes256-cbc"
	DefaultSendContentType = "application/octet-stream"
	DefaultSendSubject     = "AS2 message"
	DefaultSendTimeout     = 5 * time.Minute
	DefaultMDNTimeout      = time.Hour
)

// sendDigests and sendCiphers are the names package cms signs and
// encrypts with (md5 is not offered: never for signing).
var (
	sendDigests = []string{"sha1", "sha224", "sha256", "sha384", "sha512"}
	sendCiphers = []string{"3des", "aes128-cbc", "aes192-cbc", "aes256-cbc", "aes128-gcm", "aes192-gcm", "aes256-gcm"}
)

// AS2Send is how we send AS2 messages to the partner.
type AS2Send struct {
	// URL is the partner's AS2 endpoint (http or https; plain http is
	// warned about).
	URL string `yaml:"url"`
	// Digest signs the messages (sha1 … sha512, default sha256); "none"
	// sends them unsigned (an opt-out, warned).
	Digest string `yaml:"digest"`
	// Cipher encrypts them for the partner's certificate (a cms cipher
	// name, default aes256-cbc); "none" sends them unencrypted (warned).
	Cipher string `yaml:"cipher"`
	// Compression: none (default), before-signing or after-signing.
	Compression string `yaml:"compression"`
	// MDN asked for: sync (default), async or none (warned: no evidence).
	MDN string `yaml:"mdn"`
	// SignedMDN asks for a signed MDN (default true; false is an
	// opt-out, warned).
	SignedMDN bool `yaml:"signed_mdn"`
	// AsyncMDNURL is the Receipt-Delivery-Option of mdn: async (empty:
	// filled by the wiring from the gateway's public URL and AS2 path).
	AsyncMDNURL string `yaml:"async_mdn_url"`
	// ContentType of payloads submitted without one (default
	// application/octet-stream); Subject the Subject header (default
	// "AS2 message").
	ContentType string `yaml:"content_type"`
	Subject     string `yaml:"subject"`
	// EncryptionCertificate is the file of the certificate we encrypt for
	// (relative to the partners directory; default the first of
	// as2.certificates).
	EncryptionCertificate string  `yaml:"encryption_certificate"`
	TLS                   SendTLS `yaml:"tls"`
	// Timeout bounds one attempt, connect to MDN (default 5m).
	// MDNTimeout is how long an asynchronous MDN is waited for before
	// the message is sent again (default 1h).
	Timeout    Duration  `yaml:"timeout"`
	MDNTimeout Duration  `yaml:"mdn_timeout"`
	Retry      SendRetry `yaml:"retry"`

	set map[string]bool
}

// Signed, Encrypted and Compressed say what the partner's messages get.
func (s *AS2Send) Signed() bool     { return s.Digest != SendNone }
func (s *AS2Send) Encrypted() bool  { return s.Cipher != SendNone }
func (s *AS2Send) Compressed() bool { return s.Compression != SendNone }

// AS4Send is how we send AS4 messages to the partner.
type AS4Send struct {
	// URL is the partner's AS4 endpoint.
	URL   string    `yaml:"url"`
	PMode SendPMode `yaml:"pmode"`
	// Encrypt the payloads (default true; false is an opt-out, warned;
	// bdew: always). Compress them with gzip (default true; bdew:
	// always). ReceiptRequired: a message is delivered only on a signed
	// receipt (default true; false is an opt-out, warned; bdew: always).
	Encrypt         bool `yaml:"encrypt"`
	Compress        bool `yaml:"compress"`
	ReceiptRequired bool `yaml:"receipt_required"`
	// EncryptionCertificate: as for AS2 (default the first of
	// as4.certificates).
	EncryptionCertificate string    `yaml:"encryption_certificate"`
	TLS                   SendTLS   `yaml:"tls"`
	Timeout               Duration  `yaml:"timeout"`
	Retry                 SendRetry `yaml:"retry"`
	// FromPartyID is the party_id of the identity of ours we send as
	// (eb:From; its key signs); empty: the first identity with a
	// party_id. It must be one of our identities' (CheckIdentities).
	FromPartyID string `yaml:"from_party_id"`
	// FilenameProperty names the part property that carries a submission's
	// file name (e.g. FileName); empty: the file name is not sent (AS4 has
	// no standard place for it).
	FilenameProperty string `yaml:"filename_property"`

	set map[string]bool
}

// SendPMode is the P-Mode of the messages we send: eb:AgreementRef (and
// its @pmode and @type), eb:Service, eb:Action, eb:To and the roles.
// When ID names one of as4.pmodes, that P-Mode's agreement, service and
// action fill the fields left empty; ToPartyID and ToPartyType default to
// as4.party_id and party_type; a bdew partner's agreement defaults to the
// BDEW agreement.
type SendPMode struct {
	ID            string `yaml:"id"`
	Agreement     string `yaml:"agreement"`
	AgreementType string `yaml:"agreement_type"`
	Service       string `yaml:"service"`
	ServiceType   string `yaml:"service_type"`
	Action        string `yaml:"action"`
	ToPartyID     string `yaml:"to_party_id"`
	ToPartyType   string `yaml:"to_party_type"`
	FromRole      string `yaml:"from_role"`
	ToRole        string `yaml:"to_role"`
}

// SendTLS is the TLS of our connections to the partner's endpoint. Files
// are relative to the partners directory (see Directory.SendFile).
type SendTLS struct {
	// CAFile: the CA certificates (PEM) the server's certificate must
	// chain to, instead of the system's.
	CAFile string `yaml:"ca_file"`
	// PinnedCertificate: the server must present exactly this certificate.
	PinnedCertificate string `yaml:"pinned_certificate"`
	// ClientCertificate and ClientKey: our TLS client certificate (mutual
	// TLS); both or neither.
	ClientCertificate string `yaml:"client_certificate"`
	ClientKey         string `yaml:"client_key"`
}

// SendRetry is the partner's retry schedule (zero fields: those of
// outbound.DefaultRetryPolicy).
type SendRetry struct {
	First       Duration `yaml:"first"`
	Factor      float64  `yaml:"factor"`
	Max         Duration `yaml:"max"`
	GiveUpAfter Duration `yaml:"give_up_after"`

	set map[string]bool
}

// Policy is the schedule with the defaults of outbound.DefaultRetryPolicy
// for the fields not written.
func (r SendRetry) Policy() outbound.RetryPolicy {
	p := outbound.DefaultRetryPolicy
	if r.First > 0 {
		p.First = r.First.Std()
	}
	if r.Factor > 0 {
		p.Factor = r.Factor
	}
	if r.Max > 0 {
		p.Max = r.Max.Std()
	}
	if r.GiveUpAfter > 0 {
		p.GiveUpAfter = r.GiveUpAfter.Std()
	}
	return p
}

// validate checks the schedule as written (a field written as 0 is an
// error, not the default) and as completed by the defaults.
func (r SendRetry) validate(field string, bad func(field, format string, a ...any)) {
	for key, zero := range map[string]bool{"first": r.First == 0, "factor": r.Factor == 0, "max": r.Max == 0, "give_up_after": r.GiveUpAfter == 0} {
		if r.set[key] && zero {
			bad(field+"."+key, "must be greater than 0 (leave it out for the default)")
		}
	}
	p := r.Policy()
	if r.Factor != 0 && p.Factor < 1 {
		bad(field+".factor", "%v must be at least 1", r.Factor)
	}
	if p.Max < p.First {
		bad(field+".max", "%s is shorter than first %s", p.Max, p.First)
	}
}

// Sends lists the protocols the partner is set up to send with (AS2
// first); empty: the partner only receives.
func (p *Partner) Sends() []outbound.Protocol {
	var out []outbound.Protocol
	if p.AS2 != nil && p.AS2.Send != nil {
		out = append(out, outbound.AS2)
	}
	if p.AS4 != nil && p.AS4.Send != nil {
		out = append(out, outbound.AS4)
	}
	return out
}

// checkSendURL: an absolute http or https URL with a host.
func checkSendURL(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q is not an absolute http(s) URL", raw)
	}
	if u.User != nil {
		return fmt.Errorf("%q holds credentials; they do not belong in a partner file", u.Redacted())
	}
	return nil
}

func isPlainHTTP(raw string) bool { return strings.HasPrefix(strings.ToLower(raw), "http:") }

func oneOf(v string, set []string) bool {
	for _, s := range set {
		if s == v {
			return true
		}
	}
	return false
}

// checkDuration: a field written as 0 is an error; left out, def.
func checkDuration(d *Duration, written bool, def time.Duration, field string, bad func(field, format string, a ...any)) {
	if *d == 0 {
		if written {
			bad(field, "must be greater than 0 (leave it out for the default %s)", def)
		}
		*d = Duration(def)
	}
}

// applyDefaults fills in the secure defaults of the settings left out
// (set: the keys written in as2.send).
func (s *AS2Send) applyDefaults(set, retry map[string]bool) {
	s.set, s.Retry.set = set, retry
	s.SignedMDN = s.SignedMDN || !set["signed_mdn"]
}

// validate checks as2.send and fills in its defaults. a is the AS2
// section (its certificates encrypt and verify the MDN).
func (s *AS2Send) validate(a *AS2, bad func(field, format string, a ...any)) {
	if err := checkSendURL(s.URL); err != nil {
		bad("as2.send.url", "%v", err)
	}
	switch d := NormalizeDigest(s.Digest); {
	case s.Digest == "":
		s.Digest = DefaultSendDigest
	case d == SendNone || oneOf(d, sendDigests):
		s.Digest = d
	default:
		bad("as2.send.digest", "%q is not one of %s, none", s.Digest, strings.Join(sendDigests, ", "))
	}
	switch c := strings.ToLower(strings.TrimSpace(s.Cipher)); {
	case s.Cipher == "":
		s.Cipher = DefaultSendCipher
	case c == SendNone || oneOf(c, sendCiphers):
		s.Cipher = c
	default:
		bad("as2.send.cipher", "%q is not one of %s, none", s.Cipher, strings.Join(sendCiphers, ", "))
	}
	switch s.Compression {
	case "":
		s.Compression = SendNone
	case SendNone, CompressBeforeSigning, CompressAfterSigning:
	default:
		bad("as2.send.compression", "%q is not one of none, before-signing, after-signing", s.Compression)
	}
	switch s.MDN {
	case "":
		s.MDN = MDNSync
	case MDNSync, MDNAsync, SendNone:
	default:
		bad("as2.send.mdn", "%q is not one of sync, async, none", s.MDN)
	}
	if s.AsyncMDNURL != "" {
		if s.MDN != MDNAsync {
			bad("as2.send.async_mdn_url", "is only used with mdn: async (mdn is %s)", s.MDN)
		} else if err := checkSendURL(s.AsyncMDNURL); err != nil {
			bad("as2.send.async_mdn_url", "%v", err)
		}
	}
	if s.ContentType == "" {
		s.ContentType = DefaultSendContentType
	} else if mt, _, err := mime.ParseMediaType(s.ContentType); err != nil || !strings.Contains(mt, "/") {
		bad("as2.send.content_type", "%q is not a media type (type/subtype)", s.ContentType)
	}
	if s.Subject == "" {
		s.Subject = DefaultSendSubject
	} else if strings.ContainsFunc(s.Subject, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		bad("as2.send.subject", "%q holds a control character (a line break would end the header)", s.Subject)
	}
	noCerts := len(a.Certificates) == 0
	if s.Encrypted() && noCerts && s.EncryptionCertificate == "" {
		bad("as2.send.cipher", "encrypting needs the partner's certificate: as2.certificates or as2.send.encryption_certificate (cipher: none sends unencrypted)")
	}
	if s.MDN != SendNone && s.SignedMDN && noCerts && !a.CA() {
		bad("as2.send.signed_mdn", "verifying the partner's signed MDN needs as2.certificates or trust: ca (signed_mdn: false accepts unsigned MDNs)")
	}
	checkDuration(&s.Timeout, s.set["timeout"], DefaultSendTimeout, "as2.send.timeout", bad)
	checkDuration(&s.MDNTimeout, s.set["mdn_timeout"], DefaultMDNTimeout, "as2.send.mdn_timeout", bad)
	s.TLS.validate("as2.send.tls", s.URL, bad)
	s.Retry.validate("as2.send.retry", bad)
}

// applyDefaults fills in the secure defaults of the settings left out.
func (s *AS4Send) applyDefaults(set, retry map[string]bool) {
	s.set, s.Retry.set = set, retry
	s.Encrypt = s.Encrypt || !set["encrypt"]
	s.Compress = s.Compress || !set["compress"]
	s.ReceiptRequired = s.ReceiptRequired || !set["receipt_required"]
}

// validate checks as4.send and fills in its defaults, after the profile
// of a is applied.
func (s *AS4Send) validate(a *AS4, bad func(field, format string, a ...any)) {
	if err := checkSendURL(s.URL); err != nil {
		bad("as4.send.url", "%v", err)
	}
	if a.IsBDEW() {
		// The profile's floor, for what we send as for what we receive.
		for _, o := range []struct {
			key string
			v   *bool
		}{{"encrypt", &s.Encrypt}, {"compress", &s.Compress}, {"receipt_required", &s.ReceiptRequired}} {
			if !*o.v { // written as false: left out, it is true
				bad("as4.send."+o.key, "the bdew profile requires it; remove the field or set it to true")
			}
		}
		if isPlainHTTP(s.URL) {
			bad("as4.send.url", "the bdew profile requires TLS: an https URL")
		}
	}
	pm := &s.PMode
	for _, agreed := range a.PModes {
		if pm.ID != "" && agreed.ID == pm.ID {
			pm.Agreement = firstSet(pm.Agreement, agreed.Agreement)
			pm.Service = firstSet(pm.Service, agreed.Service)
			pm.ServiceType = firstSet(pm.ServiceType, agreed.ServiceType)
			pm.Action = firstSet(pm.Action, agreed.Action)
		}
	}
	if a.IsBDEW() && pm.Agreement == "" {
		pm.Agreement = BDEWAgreement
	}
	if pm.ToPartyID == "" {
		pm.ToPartyID, pm.ToPartyType = a.PartyID, firstSet(pm.ToPartyType, a.PartyType)
	}
	if s.FilenameProperty != "" {
		if err := outbound.ValidateProperties([]outbound.Property{{Name: s.FilenameProperty}}); err != nil {
			bad("as4.send.filename_property", "%v", err)
		}
	}
	if s.FromPartyID != "" && strings.TrimSpace(s.FromPartyID) != s.FromPartyID {
		bad("as4.send.from_party_id", "%q has leading or trailing spaces", s.FromPartyID)
	}
	if s.Encrypt && len(a.Certificates) == 0 && s.EncryptionCertificate == "" {
		bad("as4.send.encrypt", "encrypting needs the partner's certificate: as4.certificates or as4.send.encryption_certificate (encrypt: false sends unencrypted)")
	}
	checkDuration(&s.Timeout, s.set["timeout"], DefaultSendTimeout, "as4.send.timeout", bad)
	s.TLS.validate("as4.send.tls", s.URL, bad)
	s.Retry.validate("as4.send.retry", bad)
}

// firstSet is the first of its arguments that is not empty.
func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// validate checks what can be told without the files.
func (t SendTLS) validate(field, rawURL string, bad func(field, format string, a ...any)) {
	if (t.ClientCertificate == "") != (t.ClientKey == "") {
		bad(field+".client_key", "client_certificate and client_key go together")
	}
	if isPlainHTTP(rawURL) && t != (SendTLS{}) {
		bad(field, "set, but the url is plain http")
	}
}

// SendFile is the path of a file a sending setting names (relative to the
// partners directory unless absolute).
func (d *Directory) SendFile(name string) string {
	if name == "" || filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(d.Dir, name)
}

// loadSendTLS reads the files of a send.tls block, for their problems.
func (d *Directory) loadSendTLS(file, field string, t SendTLS) []error {
	var errs []error
	for _, f := range []struct{ key, name string }{{"ca_file", t.CAFile}, {"pinned_certificate", t.PinnedCertificate}} {
		if f.name == "" {
			continue
		}
		if _, err := certs.Certificates(d.SendFile(f.name), config.Password{}); err != nil {
			errs = append(errs, &FieldError{file, field + "." + f.key, err.Error()})
		}
	}
	if t.ClientCertificate != "" && t.ClientKey != "" {
		if _, _, err := certs.KeyPair(d.SendFile(t.ClientCertificate), d.SendFile(t.ClientKey), config.Password{}); err != nil {
			errs = append(errs, &FieldError{file, field + ".client_certificate", err.Error()})
		}
	}
	return errs
}

// loadSend reads the files of a section's send block (encryption
// certificate, TLS files) and records its opt-out warnings.
func (d *Directory) loadSend(file string, p *Partner, proto outbound.Protocol, pw config.Password) []error {
	var encFile string
	var tls SendTLS
	if proto == outbound.AS2 {
		encFile, tls = p.AS2.Send.EncryptionCertificate, p.AS2.Send.TLS
	} else {
		encFile, tls = p.AS4.Send.EncryptionCertificate, p.AS4.Send.TLS
	}
	section := string(proto)
	errs := d.loadSendTLS(file, section+".send.tls", tls)
	if encFile != "" {
		found, err := certs.Certificates(d.SendFile(encFile), pw)
		if err != nil {
			errs = append(errs, &FieldError{file, section + ".send.encryption_certificate", err.Error()})
		} else {
			d.certs[section+"send\x00"+p.ID] = found[:1]
		}
	}
	if len(errs) > 0 {
		return errs
	}
	warn := func(format string, a ...any) {
		d.Warnings = append(d.Warnings, file+": "+fmt.Sprintf(format, a...))
	}
	if proto == outbound.AS2 {
		s := p.AS2.Send
		if !s.Signed() {
			warn("as2.send.digest: none sends unsigned messages to %q: the partner cannot tell them from forgeries", p.AS2.ID)
		}
		if !s.Encrypted() {
			warn("as2.send.cipher: none sends unencrypted messages to %q (readable on the way unless TLS protects every hop)", p.AS2.ID)
		}
		switch {
		case s.MDN == SendNone:
			warn("as2.send.mdn: none asks %q for no MDN: a message counts as delivered on the HTTP answer alone, without evidence", p.AS2.ID)
		case !s.SignedMDN:
			warn("as2.send.signed_mdn: false accepts unsigned MDNs from %q: no proof that the partner received the message", p.AS2.ID)
		}
		if isPlainHTTP(s.URL) {
			warn("as2.send.url %s is plain http: use https", s.URL)
		}
		return nil
	}
	s := p.AS4.Send
	if !s.Encrypt {
		warn("as4.send.encrypt: false sends unencrypted payloads to party %q (readable on the way unless TLS protects every hop)", p.AS4.PartyID)
	}
	if !s.ReceiptRequired {
		warn("as4.send.receipt_required: false counts a message to party %q as delivered without a signed receipt: no evidence", p.AS4.PartyID)
	}
	if isPlainHTTP(s.URL) {
		warn("as4.send.url %s is plain http: use https", s.URL)
	}
	return nil
}

// SendEncryptionCertificate is the certificate we encrypt p's messages for
// with proto: send.encryption_certificate, else the first of the
// section's certificates (nil: none).
func (d *Directory) SendEncryptionCertificate(p *Partner, proto outbound.Protocol) *x509.Certificate {
	if c := d.certs[string(proto)+"send\x00"+p.ID]; len(c) > 0 {
		return c[0]
	}
	if c := d.certs[string(proto)+"\x00"+p.ID]; len(c) > 0 {
		return c[0]
	}
	return nil
}

// String is the set-up in one line, for partners check.
func (s *AS2Send) String() string {
	sec := []string{"unsigned"}
	if s.Signed() {
		sec[0] = "signed " + s.Digest
	}
	if s.Encrypted() {
		sec = append(sec, "encrypted "+s.Cipher)
	} else {
		sec = append(sec, "unencrypted")
	}
	if s.Compressed() {
		sec = append(sec, "compressed "+s.Compression)
	}
	switch {
	case s.MDN == SendNone:
		sec = append(sec, "no MDN")
	case s.SignedMDN:
		sec = append(sec, s.MDN+" signed MDN")
	default:
		sec = append(sec, s.MDN+" unsigned MDN")
	}
	return fmt.Sprintf("as2 to %s (%s; timeout %s; %s)", s.URL, strings.Join(sec, ", "), s.Timeout.Std(), retryString(s.Retry.Policy()))
}

// String is the set-up in one line, for partners check.
func (s *AS4Send) String() string {
	sec := []string{"signed"}
	sec = append(sec, map[bool]string{true: "encrypted", false: "unencrypted"}[s.Encrypt])
	if s.Compress {
		sec = append(sec, "compressed")
	}
	sec = append(sec, map[bool]string{true: "signed receipt", false: "no receipt required"}[s.ReceiptRequired])
	return fmt.Sprintf("as4 to %s (%s; timeout %s; %s)", s.URL, strings.Join(sec, ", "), s.Timeout.Std(), retryString(s.Retry.Policy()))
}

func retryString(p outbound.RetryPolicy) string {
	return fmt.Sprintf("retry %s ×%g up to %s apart for %s", p.First, p.Factor, p.Max, p.GiveUpAfter)
}

// SendIdentity is the index in ids (our identities in order,
// config.AllIdentities) of the identity we are towards p with proto: for
// AS2 the one whose as2_id is as2.our_as2_id, for AS4 the one whose
// party_id is as4.send.from_party_id (the first of them when several
// identities share the party_id with different types); without the key,
// the first identity with an as2_id (party_id). Its first key signs what
// we send (for a bdew partner its brainpoolP256r1 signing key). -1 when
// none matches.
func (p *Partner) SendIdentity(proto outbound.Protocol, ids []config.Identity) int {
	var want string
	name := func(id config.Identity) string { return id.AS2ID }
	switch proto {
	case outbound.AS2:
		if p.AS2 != nil {
			want = p.AS2.OurID
		}
	case outbound.AS4:
		if p.AS4 != nil && p.AS4.Send != nil {
			want = p.AS4.Send.FromPartyID
		}
		name = func(id config.Identity) string { return id.PartyID }
	default:
		return -1
	}
	for j, id := range ids {
		if n := name(id); n != "" && (want == "" || n == want) {
			return j
		}
	}
	return -1
}

// CheckIdentities refuses a partner file we send to that names an identity
// we do not have (ids: our identities, config.AllIdentities): with
// as2.send, as2.our_as2_id must be the as2_id of one of them (it picks the
// identity that signs); as4.send.from_party_id the party_id of one. A
// receive-only partner's unknown our_as2_id is accepted as it always was
// (its MDNs are signed with the first identity's key), so that no
// configuration that ran stops starting, with a warning added to
// d.Warnings. Every problem is reported, naming the file and the key.
func (d *Directory) CheckIdentities(ids []config.Identity) error {
	var as2IDs, partyIDs []string
	add := func(names []string, n string) []string {
		if q := fmt.Sprintf("%q", n); n != "" && !oneOf(q, names) {
			names = append(names, q)
		}
		return names
	}
	for _, id := range ids {
		as2IDs, partyIDs = add(as2IDs, id.AS2ID), add(partyIDs, id.PartyID)
	}
	ours := func(names []string) string {
		if len(names) == 0 {
			return "none"
		}
		return strings.Join(names, ", ")
	}
	var errs []error
	for _, p := range d.Partners {
		if p.AS2 != nil && p.AS2.OurID != "" && p.SendIdentity(outbound.AS2, ids) < 0 {
			if p.AS2.Send != nil {
				errs = append(errs, &FieldError{p.File, "as2.our_as2_id",
					fmt.Sprintf("%q is the as2_id of none of our identities (identity, identities[]: %s)", p.AS2.OurID, ours(as2IDs))})
			} else {
				d.Warnings = append(d.Warnings, fmt.Sprintf("%s: as2.our_as2_id: %q is the as2_id of none of our identities (identity, identities[]: %s); "+
					"its messages are answered with MDNs signed by the first identity's key", p.File, p.AS2.OurID, ours(as2IDs)))
			}
		}
		if p.AS4 != nil && p.AS4.Send != nil && p.AS4.Send.FromPartyID != "" && p.SendIdentity(outbound.AS4, ids) < 0 {
			errs = append(errs, &FieldError{p.File, "as4.send.from_party_id",
				fmt.Sprintf("%q is the party_id of none of our identities (identity, identities[]: %s)", p.AS4.Send.FromPartyID, ours(partyIDs))})
		}
	}
	return errors.Join(errs...)
}
