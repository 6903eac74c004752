package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/partners"
)

const sendUsage = `usage: gateway send -file PATH [-url URL] [options]
Sends PATH as one AS2 message (RFC 4130), signed, encrypted and compressed as chosen,
posts it and checks the MDN: its signature against the recipient's certificate, its
Original-Message-ID, its disposition and its Received-Content-MIC. Exit status 0 only
for a positive MDN (or, without an MDN, an HTTP 2xx).

Acting as a configured partner towards this gateway (URL, AS2 ids and the gateway's
certificate come from the configuration; the partner's own key is given with -key):
  gateway send -config testdata/demo/gateway.yaml -partner demo \
    -key testdata/demo/keys/demo-partner.key -file order.edi
Without a configuration, everything is given on the command line:
  gateway send -as2-from DEMO -as2-to GATEWAY \
    -key testdata/demo/keys/demo-partner.key -cert testdata/demo/partners/demo-partner.pem \
    -recipient-cert testdata/demo/keys/gateway.pem -url http://127.0.0.1:8080/as2 -file order.edi
Resend with -message-id (or -repeat 2) to see the duplicate MDN.
`

// sendAS2 is `gateway send`.
func sendAS2(args []string, stdout, stderr io.Writer) error {
	o, err := parseSendFlags(args, stderr)
	if err != nil {
		return err
	}
	c, partner, partnerCerts, err := o.client()
	if err != nil {
		return err
	}
	if err := o.chooseProtection(c, partner, partnerCerts); err != nil {
		return err
	}
	payload, err := os.Open(o.file)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer payload.Close()
	mdns, answer, err := o.prepareAsyncMDN(c)
	if err != nil {
		return err
	}
	if mdns != nil {
		defer mdns.close()
	}
	bar := newProgress(stderr, o.quiet)
	msg, err := o.buildMessage(c, payload, bar)
	if err != nil {
		return err
	}
	defer msg.Close()
	failed := 0
	for i := 1; i <= o.repeat; i++ {
		if o.repeat > 1 {
			fmt.Fprintf(stdout, "send %d of %d\n", i, o.repeat)
		}
		ok, err := o.sendAndCheckMDN(stdout, c, msg, bar, mdns, answer)
		if err != nil {
			return err
		}
		if !ok {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("send: %d of %d sends of %s not accepted", failed, o.repeat, msg.ID)
	}
	return nil
}

// sendOptions are the flags of `gateway send`.
type sendOptions struct {
	cfgPath, partnerID, file, url, from, to string
	keyFile, certFile, rcptFile             string
	sign, encrypt, mdnMode, asyncURL        string
	asyncListen, contentType, filename, cte string
	messageID, subject, spoolDir            string
	pss, oaep, compress, compressAfter      bool
	mdnUnsigned, quiet                      bool
	wait, timeout, retryFor                 time.Duration
	repeat                                  int
	// set names the flags given on the command line.
	set map[string]bool
}

// parseSendFlags reads the command line of `gateway send`.
func parseSendFlags(args []string, stderr io.Writer) (*sendOptions, error) {
	o := &sendOptions{}
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, sendUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.cfgPath, "config", "", "gateway YAML file: send as -partner to this gateway")
	fs.StringVar(&o.partnerID, "partner", "", "partner id (with -config): its AS2 ids and policy are used")
	fs.StringVar(&o.file, "file", "", "the payload to send (required)")
	fs.StringVar(&o.url, "url", "", "the receiver's AS2 URL (default with -config: http(s)://listen + as2.path)")
	fs.StringVar(&o.from, "as2-from", "", "AS2-From (default with -config: the partner's as2_id)")
	fs.StringVar(&o.to, "as2-to", "", "AS2-To (default with -config: the gateway's AS2 id for the partner)")
	fs.StringVar(&o.keyFile, "key", "", "sender's PEM private key (signs the message)")
	fs.StringVar(&o.certFile, "cert", "", "sender's PEM certificate of -key (default with -config: the partner certificate matching -key)")
	fs.StringVar(&o.rcptFile, "recipient-cert", "", "recipient's PEM certificate(s): the first encrypts, all verify the MDN (default with -config: the gateway's)")
	fs.StringVar(&o.rcptFile, "partner-cert", "", "same as -recipient-cert")
	fs.StringVar(&o.sign, "sign", "sha256", "signature digest: sha1, sha224, sha256, sha384, sha512 or none")
	fs.BoolVar(&o.pss, "pss", false, "sign with RSASSA-PSS instead of PKCS#1 v1.5")
	fs.StringVar(&o.encrypt, "encrypt", "", "content cipher: 3des, aes128-cbc, aes192-cbc, aes256-cbc, aes128-gcm, aes256-gcm or none (default: aes256-cbc when a recipient certificate is known)")
	fs.BoolVar(&o.oaep, "oaep", false, "RSAES-OAEP key transport instead of PKCS#1 v1.5")
	fs.BoolVar(&o.compress, "compress", false, "compress the payload (compress, then sign)")
	fs.BoolVar(&o.compressAfter, "compress-after-sign", false, "compress the signed entity instead (sign, then compress)")
	fs.StringVar(&o.mdnMode, "mdn", "sync", "MDN: sync, async or none")
	fs.BoolVar(&o.mdnUnsigned, "mdn-unsigned", false, "ask for an unsigned MDN")
	fs.StringVar(&o.asyncURL, "async-url", "", "Receipt-Delivery-Option for -mdn async")
	fs.StringVar(&o.asyncListen, "async-listen", "", "receive the async MDN on this address (e.g. 127.0.0.1:8078); -async-url defaults to it")
	fs.DurationVar(&o.wait, "wait", time.Minute, "how long -async-listen waits for the MDN")
	fs.StringVar(&o.contentType, "content-type", "", "payload Content-Type (default: from the file extension)")
	fs.StringVar(&o.filename, "filename", "", "Content-Disposition filename (default: the file's base name; \"-\" for none)")
	fs.StringVar(&o.cte, "transfer-encoding", "binary", "payload Content-Transfer-Encoding: binary or base64")
	fs.StringVar(&o.messageID, "message-id", "", "Message-ID (default: a new one); reuse one to test duplicate handling")
	fs.StringVar(&o.subject, "subject", "", "Subject header")
	fs.IntVar(&o.repeat, "repeat", 1, "send the identical bytes this many times (duplicates after the first)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "HTTP timeout per send")
	fs.DurationVar(&o.retryFor, "retry-for", 0, "on HTTP 503 (message in flight, store unavailable) resend after Retry-After for up to this long")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress bar (it is shown only when stderr is a terminal)")
	fs.StringVar(&o.spoolDir, "spool-dir", "", "where the message is built before it is sent: room for about its size (default: the system's temporary directory)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: send takes no arguments (use -file): %q", errUsage, fs.Args())
	}
	if o.file == "" {
		return nil, fmt.Errorf("%w: send needs -file (see gateway send -h)", errUsage)
	}
	if o.repeat < 1 {
		return nil, fmt.Errorf("%w: -repeat must be at least 1", errUsage)
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o, nil
}

// client is the AS2 client of the flags, completed from the configuration
// when -config or -partner names a partner (returned with its certificates).
func (o *sendOptions) client() (*as2client.Client, *partners.Partner, []*x509.Certificate, error) {
	c := &as2client.Client{URL: o.url, From: o.from, To: o.to, SignPSS: o.pss, OAEP: o.oaep, Subject: o.subject,
		TransferEncoding: o.cte, HTTP: &http.Client{Timeout: o.timeout}, SignedMDN: !o.mdnUnsigned, SpoolDir: o.spoolDir}
	var partner *partners.Partner
	var partnerCerts []*x509.Certificate
	if o.cfgPath != "" || o.partnerID != "" {
		var err error
		if partner, partnerCerts, err = fromConfig(c, o.cfgPath, o.partnerID); err != nil {
			return nil, nil, nil, err
		}
		if !o.set["sign"] {
			o.sign = defaultDigest(partner)
		}
	}
	if c.URL == "" || c.From == "" || c.To == "" {
		return nil, nil, nil, fmt.Errorf("%w: send needs -url, -as2-from and -as2-to (or -config and -partner)", errUsage)
	}
	if o.rcptFile != "" {
		certs, err := partners.ReadCertificates(o.rcptFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("send: -recipient-cert: %w", err)
		}
		c.RecipientCerts = certs
	}
	return c, partner, partnerCerts, nil
}

// chooseProtection sets the signature, encryption, compression and MDN
// the message is sent with, and loads the signing key.
func (o *sendOptions) chooseProtection(c *as2client.Client, partner *partners.Partner, partnerCerts []*x509.Certificate) error {
	switch d := strings.ToLower(o.sign); d {
	case "none", "":
	default:
		n, err := cms.NormalizeDigest(d)
		if err != nil {
			return fmt.Errorf("%w: -sign %q: %v", errUsage, o.sign, err)
		}
		c.SignDigest = n
	}
	if c.SignDigest != "" {
		if o.keyFile == "" {
			return fmt.Errorf("%w: signing needs -key (or -sign none)", errUsage)
		}
		if err := loadSigner(c, o.keyFile, o.certFile, partnerCerts); err != nil {
			return err
		}
	}
	switch enc := strings.ToLower(o.encrypt); enc {
	case "none":
	case "":
		if len(c.RecipientCerts) > 0 {
			c.Cipher = defaultCipher(partner)
		}
	default:
		n, err := cms.NormalizeCipher(enc)
		if err != nil {
			return fmt.Errorf("%w: -encrypt %q: %v", errUsage, o.encrypt, err)
		}
		c.Cipher = n
	}
	if c.Cipher != "" && len(c.RecipientCerts) == 0 {
		return fmt.Errorf("%w: encryption needs -recipient-cert (or -encrypt none)", errUsage)
	}
	if o.compressAfter {
		c.Compression = smime.SignThenCompress
	} else if o.compress {
		c.Compression = smime.CompressThenSign
	}
	switch as2client.MDNMode(o.mdnMode) {
	case as2client.MDNSync, as2client.MDNAsync, as2client.MDNNone:
		c.MDN = as2client.MDNMode(o.mdnMode)
	default:
		return fmt.Errorf("%w: -mdn %q is not sync, async or none", errUsage, o.mdnMode)
	}
	if c.SignedMDN && c.MDN != as2client.MDNNone && len(c.RecipientCerts) == 0 {
		return fmt.Errorf("%w: verifying a signed MDN needs -recipient-cert (or -mdn-unsigned)", errUsage)
	}
	return nil
}

// prepareAsyncMDN sets the Receipt-Delivery-Option of an async MDN
// request, listening for the MDN with -async-listen (the caller closes
// the listener), and captures the response for a partner that answers
// with a synchronous MDN instead.
func (o *sendOptions) prepareAsyncMDN(c *as2client.Client) (*mdnListener, *responseCapture, error) {
	if c.MDN != as2client.MDNAsync {
		return nil, nil, nil
	}
	var mdns *mdnListener
	if o.asyncListen != "" {
		var err error
		if mdns, err = listenMDN(o.asyncListen); err != nil {
			return nil, nil, err
		}
		if o.asyncURL == "" {
			o.asyncURL = "http://" + mdns.addr + "/mdn"
		}
	}
	if o.asyncURL == "" {
		if mdns != nil {
			mdns.close()
		}
		return nil, nil, fmt.Errorf("%w: -mdn async needs -async-url or -async-listen", errUsage)
	}
	c.AsyncURL = o.asyncURL
	// A partner may answer an async request with a synchronous MDN (ours
	// does when the Receipt-Delivery-Option is not one it may post to):
	// the response is kept to report that MDN instead of waiting for one
	// that never comes.
	answer := &responseCapture{base: c.HTTP.Transport}
	c.HTTP.Transport = answer
	return mdns, answer, nil
}

// buildMessage builds the message as a stream into a spool file (signing,
// compression and encryption in one pass, in fixed memory), to be sent
// from there, with its length, as often as asked.
func (o *sendOptions) buildMessage(c *as2client.Client, payload *os.File, bar *progressBar) (*as2client.Message, error) {
	st, err := payload.Stat()
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	ct := o.contentType
	if ct == "" {
		ct = as2ContentType(o.file)
	}
	name := o.filename
	switch name {
	case "":
		name = filepath.Base(o.file)
	case "-":
		name = ""
	}
	bar.phase("preparing")
	msg, err := c.PrepareStream(bar.reader(payload, st.Size()), ct, name)
	bar.end()
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	if o.messageID != "" {
		id := strings.TrimSpace(o.messageID)
		if !strings.HasPrefix(id, "<") {
			id = "<" + id + ">"
		}
		msg.ID = id
		msg.Header.Set("Message-Id", id)
	}
	if bar != nil {
		c.Progress = bar.update
	}
	return msg, nil
}

// sendAndCheckMDN sends msg once (again after Retry-After while the
// gateway answers 503, up to -retry-for), checks the MDN and prints the
// result; it reports whether the send was accepted.
func (o *sendOptions) sendAndCheckMDN(stdout io.Writer, c *as2client.Client, msg *as2client.Message, bar *progressBar, mdns *mdnListener, answer *responseCapture) (bool, error) {
	ctx := context.Background()
	deadline := time.Now().Add(o.retryFor)
	send := func() (*as2client.Result, error) {
		bar.phase("sending")
		defer bar.end()
		return c.Send(ctx, msg)
	}
	res, err := send()
	for err == nil && res.Status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
		pause := min(max(res.RetryAfter, time.Second), time.Until(deadline))
		fmt.Fprintf(stdout, "busy:         HTTP 503 (%s); resending in %s\n", strings.Join(res.Problems, "; "), pause.Round(time.Second))
		time.Sleep(pause)
		res, err = send()
	}
	if err != nil {
		return false, fmt.Errorf("send: %w", err)
	}
	fmt.Fprintf(stdout, "message-id:   %s\nfrom/to:      %s -> %s\nsent:         %d bytes in %s, HTTP %d\nprotection:   %s\n",
		msg.ID, c.From, c.To, res.BytesSent, res.Elapsed.Round(time.Millisecond), res.Status, protection(c))
	check := res.MDN
	if h, body, ok := answer.mdn(); ok && c.MDN == as2client.MDNAsync && res.Status/100 == 2 {
		check = c.CheckMDN(msg, h, body)
		res.Problems = append(res.Problems, check.Problems...)
		fmt.Fprintf(stdout, "mdn:          the partner answered with a synchronous MDN although async was asked: %s\n", check.Disposition)
	} else if c.MDN == as2client.MDNAsync && mdns != nil && res.Status/100 == 2 {
		fmt.Fprintf(stdout, "mdn:          waiting up to %s for the async MDN at %s\n", o.wait, c.AsyncURL)
		h, body, err := mdns.wait(msg.ID, o.wait)
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
		} else {
			check = c.CheckMDN(msg, h, body)
			res.Problems = append(res.Problems, check.Problems...)
		}
	} else if c.MDN == as2client.MDNAsync && res.Status/100 == 2 {
		fmt.Fprintf(stdout, "mdn:          asynchronous, to %s (not checked here)\n", c.AsyncURL)
	}
	if check != nil {
		printMDN(stdout, check, msg)
	}
	if res.OK() {
		fmt.Fprintln(stdout, "result:       OK")
		return true, nil
	}
	fmt.Fprintf(stdout, "result:       FAILED: %s\n", strings.Join(res.Problems, "; "))
	return false, nil
}

// fromConfig fills c from the gateway configuration, acting as partner id
// towards this gateway.
func fromConfig(c *as2client.Client, path, id string) (*partners.Partner, []*x509.Certificate, error) {
	if path == "" || id == "" {
		return nil, nil, fmt.Errorf("%w: -config and -partner go together", errUsage)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, err
	}
	dir, err := partners.Load(cfg.Partners)
	if err != nil {
		return nil, nil, err
	}
	var p *partners.Partner
	for _, q := range dir.Partners {
		if q.ID == id {
			p = q
		}
	}
	if p == nil || p.AS2 == nil {
		return nil, nil, fmt.Errorf("send: no AS2 partner %q in %s", id, cfg.Partners)
	}
	if c.From == "" {
		c.From = p.AS2.ID
	}
	if c.To == "" {
		c.To = p.AS2.OurID
		if c.To == "" {
			c.To = cfg.Identity.AS2ID
		}
	}
	if c.URL == "" {
		if c.URL, err = gatewayURL(cfg, cfg.AS2.Path); err != nil {
			return nil, nil, fmt.Errorf("send: %w", err)
		}
	}
	for _, k := range cfg.Identity.Keys {
		certs, err := keyCertificates(k)
		if err != nil {
			return nil, nil, fmt.Errorf("send: %w", err)
		}
		c.RecipientCerts = append(c.RecipientCerts, certs...)
	}
	// The partner's configured certificates identify the certificate of
	// -key when -cert is not given.
	return p, dir.AS2Certificates(p), nil
}

// gatewayURL is the URL of the configured gateway's endpoint at path:
// http(s)://listen (an unspecified address as 127.0.0.1).
func gatewayURL(cfg *config.Config, path string) (string, error) {
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("listen %q: %w", cfg.Listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	scheme := "http"
	if cfg.TLS.Cert != "" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + path, nil
}

// keyCertificates are the certificates of one of the gateway's key pairs
// (its cert file, or the PKCS#12 key file that holds it).
func keyCertificates(k config.KeyPair) ([]*x509.Certificate, error) {
	if k.Cert != "" {
		certs, err := certs.Certificates(k.Cert, k.Password())
		if err != nil {
			return nil, fmt.Errorf("%s certificate: %w", k.Field, err)
		}
		return certs, nil
	}
	cert, _, err := certs.KeyPair("", k.Key, k.Password())
	if err != nil {
		return nil, fmt.Errorf("%s certificate: %w", k.Field, err)
	}
	return []*x509.Certificate{cert}, nil
}

// defaultDigest is sha256, or the partner's first allowed digest when its
// agreement does not allow sha256.
func defaultDigest(p *partners.Partner) string {
	if len(p.AS2.AllowedDigests) == 0 {
		return cms.DigestSHA256
	}
	for _, d := range p.AS2.AllowedDigests {
		if d == cms.DigestSHA256 {
			return d
		}
	}
	return p.AS2.AllowedDigests[0]
}

// loadSigner reads the sender's key and certificate.
func loadSigner(c *as2client.Client, keyFile, certFile string, partnerCerts []*x509.Certificate) error {
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("send: -key: %w", err)
	}
	key, err := cms.ParsePrivateKey(keyPEM)
	if err != nil {
		return fmt.Errorf("send: -key %s: %w", keyFile, err)
	}
	var certs []*x509.Certificate
	if certFile != "" {
		if certs, err = partners.ReadCertificates(certFile); err != nil {
			return fmt.Errorf("send: -cert: %w", err)
		}
	} else if len(partnerCerts) > 0 {
		certs = partnerCerts
	} else {
		return fmt.Errorf("%w: signing needs -cert (the certificate of -key)", errUsage)
	}
	for _, cert := range certs {
		if samePublicKey(cert, key) {
			c.SignCert, c.SignKey = cert, key
			return nil
		}
	}
	return fmt.Errorf("send: no certificate of %s belongs to the key %s", orDefault(certFile, "the partner"), keyFile)
}

func samePublicKey(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// defaultCipher is aes256-cbc, or the partner's first allowed cipher when
// its agreement does not allow aes256-cbc.
func defaultCipher(p *partners.Partner) string {
	if p != nil && len(p.AS2.AllowedCiphers) > 0 {
		for _, c := range p.AS2.AllowedCiphers {
			if c == cms.CipherAES256CBC {
				return c
			}
		}
		return p.AS2.AllowedCiphers[0]
	}
	return cms.CipherAES256CBC
}

func protection(c *as2client.Client) string {
	var parts []string
	if c.Compression == smime.CompressThenSign {
		parts = append(parts, "compressed")
	}
	if c.SignDigest != "" {
		s := "signed " + c.SignDigest
		if c.SignPSS {
			s += " (PSS)"
		}
		parts = append(parts, s)
	}
	if c.Compression == smime.SignThenCompress {
		parts = append(parts, "compressed")
	}
	if c.Cipher != "" {
		s := "encrypted " + c.Cipher
		if c.OAEP {
			s += " (OAEP)"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", then ")
}

func printMDN(w io.Writer, ch *as2client.MDNCheck, m *as2client.Message) {
	if ch.MDN == nil {
		fmt.Fprintln(w, "mdn:          none readable")
		return
	}
	switch {
	case ch.Verified:
		fmt.Fprintf(w, "mdn:          signed, signature verified (%s)\n", ch.Signer.Subject)
	case ch.Signed:
		fmt.Fprintln(w, "mdn:          signed, signature NOT verified")
	default:
		fmt.Fprintln(w, "mdn:          unsigned")
	}
	fmt.Fprintf(w, "disposition:  %s\n", ch.Disposition)
	verdict := "matches"
	if !ch.MICMatched {
		verdict = "does NOT match " + m.MIC + ", " + m.MICAlg
	}
	if ch.MDN.Report.MIC == "" {
		fmt.Fprintln(w, "mic:          (none returned)")
	} else {
		fmt.Fprintf(w, "mic:          %s, %s (%s)\n", ch.MDN.Report.MIC, ch.MDN.Report.MICAlg, verdict)
	}
	if t := strings.TrimSpace(ch.MDN.Report.HumanText); t != "" && (ch.Disposition.IsError() || ch.Disposition.IsWarning()) {
		fmt.Fprintf(w, "text:         %s\n", strings.Join(strings.Fields(t), " "))
	}
}

// as2ContentType guesses the payload's Content-Type from its extension.
func as2ContentType(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".edi", ".edifact":
		return "application/edifact"
	case ".x12":
		return "application/edi-x12"
	case ".xml":
		return "application/xml"
	case ".txt":
		return "text/plain"
	}
	return "application/edi-consent"
}

// mdnListener receives async MDNs for -async-listen.
type mdnListener struct {
	addr string
	srv  *http.Server
	mu   sync.Mutex
	got  map[string]receivedMDN
	cond *sync.Cond
}

type receivedMDN struct {
	header http.Header
	body   []byte
}

func listenMDN(addr string) (*mdnListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("send: -async-listen: %w", err)
	}
	l := &mdnListener{addr: ln.Addr().String(), got: map[string]receivedMDN{}}
	l.cond = sync.NewCond(&l.mu)
	l.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		id := originalMessageID(r.Header, body)
		l.mu.Lock()
		l.got[id] = receivedMDN{r.Header.Clone(), body}
		l.cond.Broadcast()
		l.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = l.srv.Serve(ln) }()
	return l, nil
}

// originalMessageID reads the Original-Message-ID of an MDN without
// validating it (CheckMDN does that).
func originalMessageID(h http.Header, body []byte) string {
	i := strings.Index(strings.ToLower(string(body)), "original-message-id:")
	if i < 0 {
		return ""
	}
	rest := string(body[i+len("original-message-id:"):])
	if j := strings.IndexAny(rest, "\r\n"); j >= 0 {
		rest = rest[:j]
	}
	return strings.Trim(strings.TrimSpace(rest), "<>")
}

// wait returns the MDN answering id (and removes it, so that -repeat waits
// for the next one).
func (l *mdnListener) wait(id string, d time.Duration) (http.Header, []byte, error) {
	key := strings.Trim(id, "<>")
	timer := time.AfterFunc(d, func() { l.mu.Lock(); l.cond.Broadcast(); l.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if m, ok := l.got[key]; ok {
			delete(l.got, key)
			return m.header, m.body, nil
		}
		if !time.Now().Before(deadline) {
			return nil, nil, errors.New("no async MDN arrived within " + d.String())
		}
		l.cond.Wait()
	}
}

func (l *mdnListener) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.srv.Shutdown(ctx)
}

// responseCapture keeps the header and the first bytes of the last
// response its client read, for send to tell a synchronous MDN from the
// empty acknowledgement of an async request.
type responseCapture struct {
	base   http.RoundTripper
	mu     sync.Mutex
	header http.Header
	body   []byte
}

// maxCapturedMDN bounds the response bytes kept (MDNs are a few KB).
const maxCapturedMDN = 1 << 20

func (c *responseCapture) RoundTrip(r *http.Request) (*http.Response, error) {
	base := c.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	c.mu.Lock()
	c.header, c.body = resp.Header.Clone(), nil
	c.mu.Unlock()
	resp.Body = capturedBody{resp.Body, c}
	return resp, nil
}

type capturedBody struct {
	io.ReadCloser
	c *responseCapture
}

func (b capturedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	if keep := min(n, maxCapturedMDN-len(b.c.body)); keep > 0 {
		b.c.body = append(b.c.body, p[:keep]...)
	}
	b.c.mu.Unlock()
	return n, err
}

// mdn returns the last response when it is an MDN (multipart/report, or
// multipart/signed around one).
func (c *responseCapture) mdn() (http.Header, []byte, bool) {
	if c == nil {
		return nil, nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	mt, _, _ := mime.ParseMediaType(c.header.Get("Content-Type"))
	if len(c.body) == 0 || (mt != "multipart/report" && mt != "multipart/signed") {
		return nil, nil, false
	}
	return c.header, c.body, true
}
