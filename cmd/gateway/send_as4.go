package main

import (
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/brainpool"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/retryafter"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/receipt"
)

const sendAS4Usage = `usage: gateway send-as4 -config FILE -partner ID -key FILE [options] FILE...
       gateway send-as4 -url URL -key FILE -cert FILE -receipt-cert FILE [-encrypt-cert FILE]
         -from PARTY -to PARTY -service S -action A [options] FILE...
Builds one AS4 user message with every FILE as a gzip-compressed attachment, signs it
(RSA: rsa-sha256 by default; Ed25519 keys: eddsa-ed25519, eDelivery AS4 2.0), encrypts it
for -encrypt-cert (RSA: RSA-OAEP; X25519: eDelivery AS4 2.0 key agreement), posts it and
verifies the signed receipt and its NonRepudiationInformation. Exit status 0 only for a
verified receipt. Files of any size are sent in fixed memory: the message is built as a
stream into a spool file (-spool-dir) and posted from there with its length; -repeat and
the resends after a 503 (-retry-for) send those same bytes.
-profile bdew applies the BDEW AS4 profile: brainpoolP256r1 keys, ecdsa-sha256 with an
X509PKIPathv1 token, ECDH-ES + ConcatKDF + kw-aes128 (recipient by X509SKI) and
aes128-gcm, encryption required, GLN party types and the BDEW agreement by default, an
empty eb:ConversationId (as phase4's BDEW sender writes it; -conversation is refused),
and the -bdew-… part properties of the first FILE when given; flags that contradict it
are refused.
With -config and -partner, acting as a configured partner towards this gateway, the
URL, the party ids, the P-Mode's service, action and agreement (-pmode ID chooses
one of several), the gateway's receipt and encryption certificates, the partner's
certificate of -key and its profile come from the configuration; flags given win
(-encrypt-cert none sends signed only):
  gateway send-as4 -config testdata/demo/gateway.yaml -partner demo \
    -key testdata/demo/keys/demo-partner.key invoice.xml
Without a configuration (the demo gateway of README.md, sending as its demo partner):
  gateway send-as4 -url http://127.0.0.1:8080/as4 \
    -key testdata/demo/keys/demo-partner.key -cert testdata/demo/partners/demo-partner.pem \
    -receipt-cert testdata/demo/keys/gateway.pem -encrypt-cert testdata/demo/keys/gateway.pem \
    -from urn:demo:partner -to urn:demo:gateway \
    -from-type urn:oasis:names:tc:ebcore:partyid-type:unregistered \
    -to-type urn:oasis:names:tc:ebcore:partyid-type:unregistered \
    -service urn:demo:invoicing -action Deliver invoice.xml
`

var signatureMethods = map[string]string{
	"rsa-sha256": wssec.AlgRSASHA256, "rsa-sha384": wssec.AlgRSASHA384, "rsa-sha512": wssec.AlgRSASHA512,
	"ecdsa-sha256": wssec.AlgECDSASHA256, "ecdsa-sha384": wssec.AlgECDSASHA384, "ecdsa-sha512": wssec.AlgECDSASHA512,
	"eddsa-ed25519": wssec.AlgEdDSAEd25519,
}

var digestMethods = map[string]string{"sha256": wssec.AlgSHA256, "sha384": wssec.AlgSHA384, "sha512": wssec.AlgSHA512}

var contentCiphers = map[string]string{
	"aes128-gcm": xmlenc.AlgAES128GCM, "aes192-gcm": xmlenc.AlgAES192GCM, "aes256-gcm": xmlenc.AlgAES256GCM,
}

var keyTransports = map[string]string{"rsa-oaep-mgf1p": xmlenc.AlgRSAOAEPMGF1P, "rsa-oaep": xmlenc.AlgRSAOAEP}

// sendAS4 is `gateway send-as4`.
func sendAS4(args []string, stdout, stderr io.Writer) error {
	o, err := parseSendAS4Flags(args, stderr)
	if err != nil {
		return err
	}
	if err := o.completeFromConfig(); err != nil {
		return err
	}
	partProps, err := o.applyProfile()
	if err != nil {
		return err
	}
	files := o.fs.Args()
	if err := o.requireFlags(files); err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	msg, err := o.message(files, partProps)
	if err != nil {
		return err
	}
	// The message is built as a stream into a spool file (every file
	// gzipped into a spool file of its own, digested, then encrypted as it
	// is written after the envelope), in fixed memory, and sent from there,
	// with its length, as often as asked.
	bar := newProgress(stderr, *o.quiet)
	bar.phase("preparing")
	if bar != nil {
		c.Progress = bar.update
	}
	out, err := c.Prepare(msg)
	bar.end()
	if err != nil {
		return fmt.Errorf("send-as4: %w", err)
	}
	defer out.Close()
	if bar != nil {
		c.HTTP.Transport = progressTransport{bar, c.HTTP.Transport}
	}
	failed := 0
	for i := 1; i <= *o.repeat; i++ {
		if *o.repeat > 1 {
			fmt.Fprintf(stdout, "send %d of %d\n", i, *o.repeat)
		}
		if err := o.sendAndVerifyReceipt(stdout, stderr, c, out, len(msg.Payloads)); err != nil {
			if *o.repeat == 1 {
				return err
			}
			fmt.Fprintln(stdout, err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("send-as4: %d of %d sends of %s not acknowledged", failed, *o.repeat, out.MessageID)
	}
	return nil
}

// sendAS4Options are the flags of `gateway send-as4`, completed from the
// configuration.
type sendAS4Options struct {
	fs                                                *flag.FlagSet
	cfgPath, partnerID, url, keyFile, certFile        *string
	keyPasswordEnv, receiptCert, encryptCert          *string
	from, fromType, to, toType, service, serviceType  *string
	action, agreement, pmode, conversation, messageID *string
	mimeType, signAlg, digest, cipher, keyTransport   *string
	saveReceipt, profile, spoolDir                    *string
	compress, allowWeak, quiet                        *bool
	timeout, retryFor                                 *time.Duration
	repeat                                            *int
	bdewParts                                         bdewPartProperties
	// From the configuration: the gateway's receipt signers and
	// encryption certificates, the partner's certificates.
	cfgSigners, cfgEncrypt []*x509.Certificate
	partnerCerts           []string
	// bdew: -profile bdew.
	bdew bool
}

// parseSendAS4Flags reads the command line of `gateway send-as4`.
func parseSendAS4Flags(args []string, stderr io.Writer) (*sendAS4Options, error) {
	fs := flag.NewFlagSet("send-as4", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, sendAS4Usage)
		fs.PrintDefaults()
	}
	o := &sendAS4Options{fs: fs}
	o.cfgPath = fs.String("config", "", "gateway YAML file: send as -partner to this gateway")
	o.partnerID = fs.String("partner", "", "partner id (with -config): its AS4 agreement supplies the flags not given")
	o.url = fs.String("url", "", "the receiver's AS4 endpoint URL (required; default with -config: http(s)://listen + as4.path)")
	o.keyFile = fs.String("key", "", "our private key that signs the message: PEM, DER or PKCS#12 (required)")
	o.certFile = fs.String("cert", "", "our certificate of -key: PEM, DER or PKCS#12 (required unless -key is a PKCS#12 file holding it)")
	o.keyPasswordEnv = fs.String("key-password-env", "", "environment variable holding the password of a PKCS#12 -key")
	o.receiptCert = fs.String("receipt-cert", "", "PEM file with the receiver's certificate(s) that sign receipts (required)")
	o.encryptCert = fs.String("encrypt-cert", "", "the receiver's encryption certificate (RSA or X25519); empty sends signed only")
	o.from = fs.String("from", "", "our eb:From PartyId (required)")
	o.fromType = fs.String("from-type", "", "type of -from")
	o.to = fs.String("to", "", "the receiver's eb:To PartyId (required)")
	o.toType = fs.String("to-type", "", "type of -to")
	o.service = fs.String("service", "", "eb:Service (required)")
	o.serviceType = fs.String("service-type", "", "type of -service")
	o.action = fs.String("action", "", "eb:Action (required)")
	o.agreement = fs.String("agreement", "", "eb:AgreementRef")
	o.pmode = fs.String("pmode", "", "eb:AgreementRef/@pmode (with -config: the id of the partner's P-Mode to send under)")
	o.conversation = fs.String("conversation", "", "eb:ConversationId (default: the message id; -profile bdew sends it empty)")
	o.messageID = fs.String("message-id", "", "eb:MessageId (default: a new UUID); resend with the same id to test duplicate handling")
	o.mimeType = fs.String("mime", "", "MIME type of every FILE (default: from the file extension)")
	o.compress = fs.Bool("compress", true, "gzip the attachments (CompressionType application/gzip)")
	o.signAlg = fs.String("sign-alg", "", "rsa-sha256, rsa-sha384, rsa-sha512, ecdsa-sha256/384/512 or eddsa-ed25519 (default: by key)")
	o.digest = fs.String("digest", "sha256", "reference digest: sha256, sha384 or sha512")
	o.cipher = fs.String("cipher", "aes128-gcm", "content encryption: aes128-gcm, aes192-gcm or aes256-gcm")
	o.keyTransport = fs.String("key-transport", "rsa-oaep-mgf1p", "RSA key transport: rsa-oaep-mgf1p or rsa-oaep (xmlenc 1.1, MGF1-SHA256)")
	o.timeout = fs.Duration("timeout", 2*time.Minute, "HTTP timeout")
	o.allowWeak = fs.Bool("allow-weak-keys", false, "accept RSA keys of 1024 to 2047 bits for the receipt signer and the encryption certificate (legacy receivers)")
	o.saveReceipt = fs.String("save-receipt", "", "write the answer (receipt or error signal) to this file")
	o.profile = fs.String("profile", "", "bdew: send as the BDEW AS4 profile prescribes (see above)")
	bdewParts := &o.bdewParts
	fs.StringVar(&bdewParts.documentType, "bdew-document-type", "", "with -profile bdew: PartProperty BDEWDocumentType of the first FILE (e.g. UTILMD, A01)")
	fs.StringVar(&bdewParts.documentNo, "bdew-document-no", "", "with -profile bdew: PartProperty BDEWDocumentNo of the first FILE")
	fs.StringVar(&bdewParts.documentDate, "bdew-document-date", "", "with -profile bdew: PartProperty BDEWDocumentDate of the first FILE, as written (e.g. 2025-01-01)")
	fs.StringVar(&bdewParts.fulfillmentDate, "bdew-fulfillment-date", "", "with -profile bdew: PartProperty BDEWFulfillmentDate of the first FILE, as written (a date or, for schedules, an interval)")
	fs.StringVar(&bdewParts.subjectPartyID, "bdew-subject-party-id", "", "with -profile bdew: PartProperty BDEWSubjectPartyID of the first FILE")
	fs.StringVar(&bdewParts.subjectPartyRole, "bdew-subject-party-role", "", "with -profile bdew: PartProperty BDEWSubjectPartyRole of the first FILE")
	fs.StringVar(&bdewParts.applicationReference, "bdew-application-reference", "", "with -profile bdew: PartProperty BDEWApplicationReference of the first FILE")
	o.quiet = fs.Bool("quiet", false, "no progress bar (it is shown only when stderr is a terminal)")
	o.spoolDir = fs.String("spool-dir", "", "where the message is built before it is sent: room for about twice its size (default: the system's temporary directory)")
	o.repeat = fs.Int("repeat", 1, "send the identical bytes this many times (duplicates after the first)")
	o.retryFor = fs.Duration("retry-for", 0, "on HTTP 503 (message in flight, store unavailable) resend after Retry-After for up to this long")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *o.repeat < 1 {
		return nil, fmt.Errorf("%w: -repeat must be at least 1", errUsage)
	}
	return o, nil
}

// completeFromConfig fills the flags not given from the partner's AS4
// agreement when -config or -partner names one.
func (o *sendAS4Options) completeFromConfig() error {
	if *o.cfgPath == "" && *o.partnerID == "" {
		return nil
	}
	d, err := as4FromConfig(*o.cfgPath, *o.partnerID, *o.pmode, *o.to, *o.toType)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		flag  *string
		value string
	}{
		{o.url, d.url}, {o.from, d.from}, {o.fromType, d.fromType}, {o.to, d.to}, {o.toType, d.toType}, {o.service, d.service},
		{o.serviceType, d.serviceType}, {o.action, d.action}, {o.agreement, d.agreement}, {o.profile, d.profile},
	} {
		if *f.flag == "" {
			*f.flag = f.value
		}
	}
	o.cfgSigners, o.cfgEncrypt, o.partnerCerts = d.receiptSigners, d.encryptCerts, d.partnerCerts
	if *o.encryptCert == "" && len(o.cfgEncrypt) == 0 {
		return fmt.Errorf("send-as4: no certificate of %s's identity keys can be encrypted for; give -encrypt-cert (or -encrypt-cert none)", *o.cfgPath)
	}
	return nil
}

// applyProfile applies -profile bdew (refusing flags that contradict it)
// and returns the BDEW part properties of the first FILE.
func (o *sendAS4Options) applyProfile() ([]as4.Property, error) {
	switch *o.profile {
	case "":
	case partners.ProfileBDEW:
		o.bdew = true
		encrypt := *o.encryptCert
		if encrypt == "" && len(o.cfgEncrypt) > 0 {
			encrypt = "(the configuration's)"
		} else if encrypt == "none" {
			encrypt = ""
		}
		if err := bdewFlags(o.fs, encrypt, *o.signAlg, *o.digest, *o.cipher, *o.compress); err != nil {
			return nil, err
		}
		if *o.fromType == "" {
			*o.fromType = partners.PartyTypeGLN
		}
		if *o.toType == "" {
			*o.toType = partners.PartyTypeGLN
		}
		if *o.agreement == "" {
			*o.agreement = partners.BDEWAgreement
		}
	default:
		return nil, fmt.Errorf("%w: unknown -profile %q (bdew)", errUsage, *o.profile)
	}
	partProps, err := o.bdewParts.properties()
	if err != nil {
		return nil, err
	}
	if len(partProps) > 0 && !o.bdew {
		return nil, fmt.Errorf("%w: the -bdew-… part properties need -profile bdew", errUsage)
	}
	return partProps, nil
}

// requireFlags refuses a command line without the flags every message
// needs, or without a FILE.
func (o *sendAS4Options) requireFlags(files []string) error {
	for name, v := range map[string]string{"-url": *o.url, "-key": *o.keyFile, "-receipt-cert": *o.receiptCert,
		"-from": *o.from, "-to": *o.to, "-service": *o.service, "-action": *o.action} {
		if v == "" && !(name == "-receipt-cert" && len(o.cfgSigners) > 0) {
			return fmt.Errorf("%w: send-as4 needs %s (see gateway send-as4 -h)", errUsage, name)
		}
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: send-as4 needs at least one FILE to send", errUsage)
	}
	return nil
}

// client is the AS4 client that signs with our key, encrypts for the
// receiver and verifies its receipts.
func (o *sendAS4Options) client() (*client.Client, error) {
	cert, key, err := signingPair(*o.certFile, *o.keyFile, certs.Password{Env: *o.keyPasswordEnv}, o.partnerCerts)
	if err != nil {
		return nil, fmt.Errorf("send-as4: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("send-as4: %s is not a signing key", *o.keyFile)
	}
	receiptSigners := o.cfgSigners
	if *o.receiptCert != "" {
		if receiptSigners, err = partners.ReadCertificates(*o.receiptCert); err != nil {
			return nil, fmt.Errorf("send-as4: -receipt-cert: %w", err)
		}
	}
	c := &client.Client{
		Signer: signer, Certificate: cert, ReceiptSigners: receiptSigners,
		HTTP: &http.Client{Timeout: *o.timeout}, AllowWeakKeys: *o.allowWeak, PKIPath: o.bdew, SpoolDir: *o.spoolDir,
	}
	if _, ok := signer.(*brainpool.PrivateKey); o.bdew && !ok {
		return nil, fmt.Errorf("send-as4: -profile bdew signs with a brainpoolP256r1 key; %s is %T", *o.keyFile, signer)
	}
	if *o.signAlg != "" {
		if c.SignatureMethod, ok = signatureMethods[*o.signAlg]; !ok {
			return nil, fmt.Errorf("%w: unknown -sign-alg %q", errUsage, *o.signAlg)
		}
	}
	if c.DigestMethod, ok = digestMethods[*o.digest]; !ok {
		return nil, fmt.Errorf("%w: unknown -digest %q", errUsage, *o.digest)
	}
	if *o.encryptCert != "none" && (*o.encryptCert != "" || len(o.cfgEncrypt) > 0) {
		if c.Encryption, err = o.encryption(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// encryption is how the message is encrypted for the receiver's
// certificate (-encrypt-cert, else the configuration's).
func (o *sendAS4Options) encryption() (*client.Encryption, error) {
	certs := o.cfgEncrypt
	if *o.encryptCert != "" {
		var err error
		if certs, err = partners.ReadCertificates(*o.encryptCert); err != nil {
			return nil, fmt.Errorf("send-as4: -encrypt-cert: %w", err)
		}
	}
	enc := &client.Encryption{Recipient: certs[0]}
	var ok bool
	if enc.Options.Content, ok = contentCiphers[*o.cipher]; !ok {
		return nil, fmt.Errorf("%w: unknown -cipher %q", errUsage, *o.cipher)
	}
	if enc.Options.KeyTransport, ok = keyTransports[*o.keyTransport]; !ok {
		return nil, fmt.Errorf("%w: unknown -key-transport %q", errUsage, *o.keyTransport)
	}
	if _, isRSA := certs[0].PublicKey.(*rsa.PublicKey); !isRSA {
		enc.Options.KeyTransport = "" // X25519 key agreement chooses its own
	}
	if o.bdew {
		if _, ok := certs[0].PublicKey.(*brainpool.PublicKey); !ok {
			return nil, fmt.Errorf("send-as4: -profile bdew encrypts for a brainpoolP256r1 key; -encrypt-cert has a %T key", certs[0].PublicKey)
		}
		enc.KeyReference = xmlenc.ByX509SKI
	}
	return enc, nil
}

// message is the user message with every FILE as a payload.
func (o *sendAS4Options) message(files []string, partProps []as4.Property) (*client.Message, error) {
	msg := &client.Message{
		MessageID: *o.messageID, ConversationID: *o.conversation,
		From: as4.PartyID{Value: *o.from, Type: *o.fromType}, To: as4.PartyID{Value: *o.to, Type: *o.toType},
		AgreementRef: *o.agreement, PMode: *o.pmode,
		Service: *o.service, ServiceType: *o.serviceType, Action: *o.action,
		// The BDEW profile (on ENTSOG's) has an empty eb:ConversationId,
		// which phase4's BDEW sender always writes (bdewFlags refuses
		// -conversation).
		EmptyConversationID: o.bdew,
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("send-as4: %w", err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("send-as4: %s is not a regular file", f)
		}
		mt := *o.mimeType
		if mt == "" {
			mt = typeByExtension(f)
		}
		p := client.Payload{MimeType: mt, Compress: *o.compress,
			Open: func() (io.ReadCloser, error) { return os.Open(f) }, Size: st.Size()}
		if len(msg.Payloads) == 0 {
			// The BDEW part properties describe the main payload, the
			// first FILE, as phase4's BDEW sender writes them.
			p.Properties = partProps
		}
		msg.Payloads = append(msg.Payloads, p)
	}
	return msg, nil
}

// sendAndVerifyReceipt posts out once (again after Retry-After while the
// gateway answers 503, up to -retry-for), saves the answer with
// -save-receipt and reports the verified receipt or the failure.
func (o *sendAS4Options) sendAndVerifyReceipt(stdout, stderr io.Writer, c *client.Client, out *client.Outgoing, payloads int) error {
	deadline := time.Now().Add(*o.retryFor)
	resp, err := postAS4(c, *o.url, out, *o.timeout)
	for errors.Is(err, client.ErrNoSignal) && resp.Status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
		pause := min(max(retryafter.Parse(resp.RetryAfter, time.Now()), time.Second), time.Until(deadline))
		fmt.Fprintf(stdout, "busy: HTTP 503; resending in %s\n", pause.Round(time.Second))
		time.Sleep(pause)
		resp, err = postAS4(c, *o.url, out, *o.timeout)
	}
	if resp != nil && *o.saveReceipt != "" {
		if werr := os.WriteFile(*o.saveReceipt, resp.Body, 0o644); werr != nil {
			fmt.Fprintln(stderr, "send-as4: saving the answer:", werr)
		}
	}
	return reportAS4(stdout, out, payloads, resp, err)
}

// postAS4 posts out once, within timeout.
func postAS4(c *client.Client, url string, out *client.Outgoing, timeout time.Duration) (*client.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Post(ctx, url, out)
}

// reportAS4 prints the outcome of one post of out; the error is for
// anything but a verified receipt.
func reportAS4(stdout io.Writer, out *client.Outgoing, payloads int, resp *client.Response, err error) error {
	if errors.Is(err, client.ErrNotCovered) && resp.Receipt != nil {
		fmt.Fprintf(stdout, "sent %s again: the receiver answered with receipt %s of %s for an earlier transmission of this message id\n"+
			"(duplicate; signature valid, but it acknowledges the earlier transmission's references, not this one's)\n",
			out.MessageID, resp.Receipt.MessageID, resp.Receipt.Timestamp.UTC().Format(time.RFC3339))
		return nil
	}
	if err != nil {
		var se *receipt.SignalError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("send-as4: message %s refused: %w", out.MessageID, se)
		case errors.Is(err, client.ErrNoSignal) && resp != nil && resp.RetryAfter != "":
			return fmt.Errorf("send-as4: message %s: HTTP %d, retry after %s s (the same message is being processed)", out.MessageID, resp.Status, resp.RetryAfter)
		}
		return fmt.Errorf("send-as4: message %s: %w", out.MessageID, err)
	}
	fmt.Fprintf(stdout, "sent %s (%d attachments, %d bytes)\nreceipt %s at %s: signature valid, %d of %d references acknowledged\n",
		out.MessageID, payloads, out.Size(), resp.Receipt.MessageID, resp.Receipt.Timestamp.UTC().Format(time.RFC3339),
		len(out.References), len(out.References))
	return nil
}

// bdewFlags refuses flags that contradict the BDEW AS4 profile.
func bdewFlags(fs *flag.FlagSet, encryptCert, signAlg, digest, cipher string, compress bool) error {
	if encryptCert == "" {
		return fmt.Errorf("%w: -profile bdew encrypts every message: -encrypt-cert is required", errUsage)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, c := range []struct {
		flag, value, want string
	}{{"sign-alg", signAlg, "ecdsa-sha256"}, {"digest", digest, "sha256"}, {"cipher", cipher, "aes128-gcm"}} {
		if set[c.flag] && c.value != c.want {
			return fmt.Errorf("%w: -profile bdew prescribes -%s %s, not %s", errUsage, c.flag, c.want, c.value)
		}
	}
	if set["conversation"] {
		return fmt.Errorf("%w: -profile bdew sends an empty eb:ConversationId (phase4's BDEW sender refuses any other); -conversation does not apply", errUsage)
	}
	if set["key-transport"] {
		return fmt.Errorf("%w: -profile bdew uses ECDH-ES key agreement; -key-transport does not apply", errUsage)
	}
	if !compress {
		return fmt.Errorf("%w: -profile bdew compresses every payload (gzip)", errUsage)
	}
	return nil
}

// bdewPartProperties are the BDEW AS4 profile's eb:PartProperties of the
// main payload. phase4's BDEW sender writes each one only when it is given,
// and its BDEW profile validator requires none of them; send-as4 does the
// same. Their values are written as given: the dates are days in phase4's
// current sender (a LocalDate), UTC date-times in its older one, and
// intervals for schedules (BDEWFulfillmentDate).
type bdewPartProperties struct {
	documentType, documentNo, documentDate, fulfillmentDate, subjectPartyID, subjectPartyRole, applicationReference string
}

// properties returns the given ones in phase4's order.
func (b bdewPartProperties) properties() ([]as4.Property, error) {
	var out []as4.Property
	for _, p := range []struct{ name, flag, value string }{
		{"BDEWDocumentType", "-bdew-document-type", b.documentType},
		{"BDEWDocumentDate", "-bdew-document-date", b.documentDate},
		{"BDEWDocumentNo", "-bdew-document-no", b.documentNo},
		{"BDEWFulfillmentDate", "-bdew-fulfillment-date", b.fulfillmentDate},
		{"BDEWSubjectPartyID", "-bdew-subject-party-id", b.subjectPartyID},
		{"BDEWSubjectPartyRole", "-bdew-subject-party-role", b.subjectPartyRole},
		{"BDEWApplicationReference", "-bdew-application-reference", b.applicationReference},
	} {
		v := strings.TrimSpace(p.value)
		if v == "" {
			continue
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%w: %s holds a control character", errUsage, p.flag)
		}
		out = append(out, as4.Property{Name: p.name, Value: v})
	}
	return out, nil
}

// typeByExtension guesses a payload's MIME type from its file name.
func typeByExtension(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".xml":
		return "application/xml"
	case ".edi", ".edifact":
		return "application/edifact"
	case ".x12":
		return "application/edi-x12"
	}
	if t := mime.TypeByExtension(filepath.Ext(name)); t != "" {
		if mt, _, err := mime.ParseMediaType(t); err == nil {
			return mt
		}
	}
	return "application/octet-stream"
}

// as4Defaults are what a configured partner's AS4 agreement and the
// gateway's configuration say about a message from that partner.
type as4Defaults struct {
	url, from, fromType, to, toType         string
	service, serviceType, action, agreement string
	profile                                 string
	receiptSigners, encryptCerts            []*x509.Certificate
	partnerCerts                            []string // files, to find the certificate of -key
}

// as4FromConfig reads the gateway configuration at path and the AS4
// agreement of partner id: the P-Mode pmode (or the partner's only, or
// first, P-Mode) gives service, action and agreement; the identity
// addressed (to, or the P-Mode's to_party_id, or the first with a party
// id) gives eb:To and the certificates that sign receipts and are
// encrypted for.
func as4FromConfig(path, id, pmode, to, toType string) (*as4Defaults, error) {
	if path == "" || id == "" {
		return nil, fmt.Errorf("%w: -config and -partner go together", errUsage)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	dir, err := partners.Load(cfg.Partners)
	if err != nil {
		return nil, err
	}
	var p *partners.Partner
	for _, q := range dir.Partners {
		if q.ID == id {
			p = q
		}
	}
	if p == nil || p.AS4 == nil {
		return nil, fmt.Errorf("send-as4: no AS4 partner %q in %s", id, cfg.Partners)
	}
	a := p.AS4
	pm := &a.PModes[0]
	if pmode != "" {
		pm = nil
		for i := range a.PModes {
			if a.PModes[i].ID == pmode {
				pm = &a.PModes[i]
			}
		}
		if pm == nil {
			return nil, fmt.Errorf("send-as4: partner %q has no P-Mode %q", id, pmode)
		}
	}
	d := &as4Defaults{from: a.PartyID, fromType: a.PartyType, service: pm.Service, serviceType: pm.ServiceType,
		action: pm.Action, agreement: pm.Agreement, profile: a.Profile}
	if d.url, err = gatewayURL(cfg, cfg.AS4.Path); err != nil {
		return nil, fmt.Errorf("send-as4: %w", err)
	}
	// The identity addressed: -to, the P-Mode's, or the first with a party id.
	if to == "" {
		to, toType = pm.ToPartyID, pm.ToPartyType
	}
	var ident *config.Identity
	ids := cfg.AllIdentities()
	for i := range ids {
		if ids[i].PartyID != "" && (to == "" || ids[i].PartyID == to && (toType == "" || ids[i].PartyType == toType)) {
			ident = &ids[i]
			break
		}
	}
	if ident == nil {
		return nil, fmt.Errorf("send-as4: %s has no identity with party_id %q", path, to)
	}
	d.to, d.toType = ident.PartyID, ident.PartyType
	for _, k := range ident.Keys {
		certs, err := keyCertificates(k)
		if err != nil {
			return nil, fmt.Errorf("send-as4: %w", err)
		}
		d.receiptSigners = append(d.receiptSigners, certs...)
		if encryptable(certs[0], a.IsBDEW()) {
			d.encryptCerts = append(d.encryptCerts, certs[0])
		}
	}
	for _, c := range a.Certificates {
		if !filepath.IsAbs(c) {
			c = filepath.Join(dir.Dir, c)
		}
		d.partnerCerts = append(d.partnerCerts, c)
	}
	return d, nil
}

// encryptable reports whether a message can be encrypted for cert: RSA or
// X25519, brainpoolP256r1 under the bdew profile.
func encryptable(cert *x509.Certificate, bdew bool) bool {
	if bdew {
		_, ok := cert.PublicKey.(*brainpool.PublicKey)
		return ok
	}
	switch k := cert.PublicKey.(type) {
	case *rsa.PublicKey:
		return true
	case *ecdh.PublicKey:
		return k.Curve() == ecdh.X25519()
	}
	return false
}

// signingPair reads -key with -cert, or, without -cert, with the
// configured partner certificate files, taking the one -key belongs to.
func signingPair(certFile, keyFile string, pw certs.Password, partnerCerts []string) (*x509.Certificate, crypto.PrivateKey, error) {
	if certFile != "" || len(partnerCerts) == 0 {
		return certs.KeyPair(certFile, keyFile, pw)
	}
	var errs []error
	for _, c := range partnerCerts {
		cert, key, err := certs.KeyPair(c, keyFile, pw)
		if err == nil {
			return cert, key, nil
		}
		errs = append(errs, err)
	}
	return nil, nil, fmt.Errorf("no certificate of the partner belongs to %s (give -cert): %w", keyFile, errors.Join(errs...))
}
