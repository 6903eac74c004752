package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/submitapi"
)

// foreignAS4 is an AS4 partner built from tools that are not our code. It
// checks the signed user message our sender posts: xmlsec1 verifies the
// references to eb:Messaging and the SOAP Body (it has no
// Attachment-Content-Signature-Transform, so it stops at the attachment's
// reference: all references but that one must verify), Go's sha256
// recomputes the attachment's digest from the MIME part, and openssl
// verifies the SignatureValue over the ds:SignedInfo canonicalized by
// Python's xml.etree (C14N 2.0 of the SignedInfo taken out with its one
// namespace: the bytes exclusive C14N gives). It answers a receipt it
// writes by hand over the message's references, signed by `xmlsec1
// --sign`. The eb:Action picks a flaw: "good", "otherdigests" (the
// receipt's NonRepudiationInformation over other digests), "otherkey"
// (signed by a key the sender does not know).
type foreignAS4 struct {
	dir, addr string
	mu        sync.Mutex
	checked   map[string]error
	receipts  map[string][]byte
}

func newForeignAS4(t *testing.T, openssl, xmlsec1, python string, payload func(action string) []byte) *foreignAS4 {
	t.Helper()
	f := &foreignAS4{dir: t.TempDir(), checked: map[string]error{}, receipts: map[string][]byte{}}
	runTool(t, openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=not the partner",
		"-keyout", filepath.Join(f.dir, "other.key"), "-out", filepath.Join(f.dir, "other.pem"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.serve(t, openssl, xmlsec1, python, payload, w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f
}

var (
	reAction     = regexp.MustCompile(`<eb:Action>([^<]*)</eb:Action>`)
	reMessageID  = regexp.MustCompile(`<eb:MessageId>([^<]*)</eb:MessageId>`)
	reSignedInfo = regexp.MustCompile(`(?s)<ds:SignedInfo>.*</ds:SignedInfo>`)
	reSigValue   = regexp.MustCompile(`<ds:SignatureValue>([^<]*)</ds:SignatureValue>`)
	reReference  = regexp.MustCompile(`(?s)<ds:Reference URI="([^"]*)">.*?<ds:DigestValue>([^<]*)</ds:DigestValue></ds:Reference>`)
	reRefCount   = regexp.MustCompile(`SignedInfo References \(ok/all\): (\d+)/(\d+)`)
)

func (f *foreignAS4) serve(t *testing.T, openssl, xmlsec1, python string, payload func(string) []byte, w http.ResponseWriter, r *http.Request) {
	fixture := filepath.Dir(demoConfig(t))
	ourCert := filepath.Join(fixture, "keys", "gateway.pem")
	dir, err := os.MkdirTemp(f.dir, "req-")
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	var envelope []byte
	attachments := map[string][]byte{}
	parse := func() error {
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/related" {
			return fmt.Errorf("content type %q", r.Header.Get("Content-Type"))
		}
		mr := multipart.NewReader(r.Body, params["boundary"])
		for i := 0; ; i++ {
			part, err := mr.NextRawPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			b, err := io.ReadAll(part)
			if err != nil {
				return err
			}
			if i == 0 {
				envelope = b
				continue
			}
			attachments["cid:"+strings.Trim(part.Header.Get("Content-Id"), "<>")] = b
		}
	}
	if err := parse(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	action := ""
	if m := reAction.FindSubmatch(envelope); m != nil {
		action = string(m[1])
	}
	refs := reReference.FindAllSubmatch(reSignedInfo.Find(envelope), -1)
	check := func() error {
		if err := verifyEnvelope(openssl, xmlsec1, python, dir, envelope, ourCert, len(attachments)); err != nil {
			return err
		}
		if len(attachments) != 1 {
			return fmt.Errorf("%d attachments", len(attachments))
		}
		// Go: the attachment's digest, and what it carries.
		for _, ref := range refs {
			uri := string(ref[1])
			if !strings.HasPrefix(uri, "cid:") {
				continue
			}
			att, ok := attachments[uri]
			if !ok {
				return fmt.Errorf("reference %s names no attachment", uri)
			}
			sum := sha256.Sum256(att)
			if base64.StdEncoding.EncodeToString(sum[:]) != string(ref[2]) {
				return fmt.Errorf("attachment %s: sha256 %x, signed digest %s", uri, sum, ref[2])
			}
			zr, err := gzip.NewReader(bytes.NewReader(att))
			if err != nil {
				return fmt.Errorf("attachment %s is not gzip: %v", uri, err)
			}
			plain, err := io.ReadAll(zr)
			if err != nil || !bytes.Equal(plain, payload(action)) {
				return fmt.Errorf("attachment %s does not carry the payload submitted (%v)", uri, err)
			}
		}
		return nil
	}
	err = check()
	f.mu.Lock()
	f.checked[action] = err
	f.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var nri strings.Builder
	for i, ref := range refs {
		digest := string(ref[2])
		if action == "otherdigests" && i == len(refs)-1 {
			sum := sha256.Sum256([]byte("other bytes"))
			digest = base64.StdEncoding.EncodeToString(sum[:])
		}
		nri.WriteString("<ebbp:MessagePartNRInformation>" + strings.Replace(string(ref[0]), string(ref[2]), digest, 1) + "</ebbp:MessagePartNRInformation>")
	}
	orig := reMessageID.FindSubmatch(envelope)
	tmpl := `<?xml version="1.0" encoding="UTF-8"?>
<S12:Envelope xmlns:S12="http://www.w3.org/2003/05/soap-envelope" xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><S12:Header><wsse:Security xmlns:wsse="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd" S12:mustUnderstand="true"><ds:Signature><ds:SignedInfo><ds:CanonicalizationMethod Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/><ds:SignatureMethod Algorithm="http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"/><ds:Reference URI="#foreign-messaging"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue></ds:DigestValue></ds:Reference><ds:Reference URI="#foreign-body"><ds:Transforms><ds:Transform Algorithm="http://www.w3.org/2001/10/xml-exc-c14n#"/></ds:Transforms><ds:DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"/><ds:DigestValue></ds:DigestValue></ds:Reference></ds:SignedInfo><ds:SignatureValue/><ds:KeyInfo><ds:X509Data><ds:X509Certificate/></ds:X509Data></ds:KeyInfo></ds:Signature></wsse:Security><eb:Messaging xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/" S12:mustUnderstand="true" wsu:Id="foreign-messaging"><eb:SignalMessage><eb:MessageInfo><eb:Timestamp>` +
		time.Now().UTC().Format("2006-01-02T15:04:05.000Z") + `</eb:Timestamp><eb:MessageId>receipt-` + strconv.FormatInt(time.Now().UnixNano(), 36) + `@foreign.test</eb:MessageId><eb:RefToMessageId>` + string(orig[1]) +
		`</eb:RefToMessageId></eb:MessageInfo><eb:Receipt><ebbp:NonRepudiationInformation xmlns:ebbp="http://docs.oasis-open.org/ebxml-bp/ebbp-signals-2.0">` + nri.String() +
		`</ebbp:NonRepudiationInformation></eb:Receipt></eb:SignalMessage></eb:Messaging></S12:Header><S12:Body wsu:Id="foreign-body"/></S12:Envelope>`
	os.WriteFile(p("receipt-template.xml"), []byte(tmpl), 0o600)
	cert, key := filepath.Join(fixture, "partners", "demo-partner.pem"), filepath.Join(fixture, "keys", "demo-partner.key")
	if action == "otherkey" {
		cert, key = filepath.Join(f.dir, "other.pem"), filepath.Join(f.dir, "other.key")
	}
	if out, err := exec.Command(xmlsec1, "--sign", "--privkey-pem", key+","+cert, "--id-attr:Id", "Messaging", "--id-attr:Id", "Body",
		"--output", p("receipt.xml"), p("receipt-template.xml")).CombinedOutput(); err != nil {
		http.Error(w, fmt.Sprintf("xmlsec1 --sign: %v: %s", err, out), 500)
		return
	}
	rc, _ := os.ReadFile(p("receipt.xml"))
	f.mu.Lock()
	f.receipts[action] = rc
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/soap+xml; charset=UTF-8")
	w.Write(rc)
}

func atoi(b []byte) int { n, _ := strconv.Atoi(string(b)); return n }

// TestSendAS4InteropWithXMLSec1: what the real gateway binary posts to an
// AS4 partner (signed, compressed; not encrypted, so that foreign tools can
// read the attachment) verifies with xmlsec1, openssl, Go's sha256 and
// Python's canonicalization against our certificate (foreignAS4), and a
// receipt written by hand over the message's references and signed by
// xmlsec1 delivers it (kept byte for byte). A receipt over other digests,
// and one signed by a key the partner file does not name, leave their
// messages queued for another attempt, with the reason.
func TestSendAS4InteropWithXMLSec1(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway binary")
	}
	openssl, xmlsec1, python := needTool(t, "openssl"), needTool(t, "xmlsec1"), needTool(t, "python3")
	payloads := map[string][]byte{}
	for _, a := range []string{"good", "otherdigests", "otherkey"} {
		payloads[a] = opaque(3000)
	}
	partner := newForeignAS4(t, openssl, xmlsec1, python, func(action string) []byte { return payloads[action] })
	gw := startObSender(t, map[string]string{"foreign4.yaml": `id: foreign4
as4:
  party_id: urn:foreign:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [demo-partner.pem]
  pmodes: [{id: inv, service: "urn:demo:invoicing", action: Deliver}]
  send:
    url: "http://` + partner.addr + `/as4"
    pmode: {id: inv}
    encrypt: false
    timeout: 10s
    retry: {first: 1s, factor: 2, max: 4s, give_up_after: 1h}
`})
	subs := map[string]submitapi.Status{}
	for _, a := range []string{"good", "otherdigests", "otherkey"} {
		subs[a] = gw.submit(t, "foreign4", "&action="+a, payloads[a])
	}
	st := gw.waitStatus(t, subs["good"].ID, 20*time.Second, "final", func(st submitapi.Status) bool { return st.Final })
	partner.mu.Lock()
	checkErr := partner.checked["good"]
	partner.mu.Unlock()
	if checkErr != nil {
		t.Fatalf("foreign tools on what we sent: %v", checkErr)
	}
	if st.State != "delivered" || st.Attempts != 1 || st.Evidence == nil || st.Evidence.Kind != "receipt" || !strings.Contains(st.Evidence.Signer, "demo") {
		t.Fatalf("a receipt signed by xmlsec1: state %s, attempts %d, reason %q, last_error %q, evidence %+v", st.State, st.Attempts, st.Reason, st.LastError, st.Evidence)
	}
	resp, err := http.Get("http://" + gw.admin + st.Evidence.URL)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	partner.mu.Lock()
	answered := partner.receipts["good"]
	partner.mu.Unlock()
	if !bytes.Equal(ev, answered) {
		t.Errorf("evidence kept is not the receipt answered (%d and %d bytes)", len(ev), len(answered))
	}
	for _, a := range []string{"otherdigests", "otherkey"} {
		st := gw.waitStatus(t, subs[a].ID, 20*time.Second, "tried", func(st submitapi.Status) bool { return st.Attempts >= 1 && st.LastError != "" })
		partner.mu.Lock()
		checkErr := partner.checked[a]
		partner.mu.Unlock()
		if checkErr != nil {
			t.Errorf("%s: foreign tools on what we sent: %v", a, checkErr)
		}
		if (st.State != "queued" && st.State != "sending") || st.Final || st.Evidence != nil {
			t.Errorf("%s: state %s, evidence %+v: a bad receipt must leave the message queued", a, st.State, st.Evidence)
		}
		t.Logf("%s: %s after %d attempts; last_error %q", a, st.State, st.Attempts, st.LastError)
		if !containsAny(st.LastError, map[string][]string{"otherdigests": {"cover", "digest", "reference"}, "otherkey": {"signature", "signer", "certificate", "trusted", "verif"}}[a]...) {
			t.Errorf("%s: last_error %q does not say what was wrong", a, st.LastError)
		}
	}
}

// verifyEnvelope checks the signature of a SOAP envelope with the signer's
// certificate certFile with tools that are not our code: xmlsec1 verifies
// its references to XML (it has no Attachment-Content-Signature-Transform:
// it stops at the first of the attachments' references, which come last,
// so all but attachments references must verify); Python's xml.etree
// canonicalizes the ds:SignedInfo, taken out with its one namespace (C14N
// 2.0 of it: the bytes exclusive C14N gives, for a SignedInfo without
// InclusiveNamespaces); openssl verifies the SignatureValue over those
// bytes (an ECDSA value, r‖s in XML DSig, re-encoded as DER for it).
func verifyEnvelope(openssl, xmlsec1, python, dir string, envelope []byte, certFile string, attachments int) error {
	p := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(p("envelope.xml"), envelope, 0o600); err != nil {
		return err
	}
	signedInfo := reSignedInfo.Find(envelope)
	if signedInfo == nil || bytes.Contains(signedInfo, []byte("InclusiveNamespaces")) {
		return fmt.Errorf("no ds:SignedInfo, or one with InclusiveNamespaces: %.300s", signedInfo)
	}
	refs := reReference.FindAllSubmatch(signedInfo, -1)
	out, _ := exec.Command(xmlsec1, "--verify", "--pubkey-cert-pem", certFile, "--id-attr:Id", "Messaging", "--id-attr:Id", "Body", p("envelope.xml")).CombinedOutput()
	m := reRefCount.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("xmlsec1 said no reference count: %s", out)
	}
	if ok, all := atoi(m[1]), atoi(m[2]); all != len(refs) || ok != all-attachments {
		return fmt.Errorf("xmlsec1 verified %d of %d references (%d attachments): %s", ok, all, attachments, out)
	}
	si := bytes.Replace(signedInfo, []byte("<ds:SignedInfo>"), []byte(`<ds:SignedInfo xmlns:ds="http://www.w3.org/2000/09/xmldsig#">`), 1)
	if err := os.WriteFile(p("signedinfo.xml"), si, 0o600); err != nil {
		return err
	}
	c14n, err := exec.Command(python, "-c", "import sys, xml.etree.ElementTree as E; sys.stdout.write(E.canonicalize(from_file=sys.argv[1]))", p("signedinfo.xml")).Output()
	if err != nil {
		return fmt.Errorf("python canonicalize: %v", err)
	}
	os.WriteFile(p("signedinfo.c14n"), c14n, 0o600)
	sv := reSigValue.FindSubmatch(envelope)
	if sv == nil {
		return fmt.Errorf("no SignatureValue")
	}
	sig, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(sv[1])), ""))
	if err != nil {
		return err
	}
	if bytes.Contains(signedInfo, []byte("ecdsa-sha256")) {
		half := len(sig) / 2
		der, err := asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(sig[:half]), new(big.Int).SetBytes(sig[half:])})
		if err != nil {
			return err
		}
		sig = der
	}
	os.WriteFile(p("sig.bin"), sig, 0o600)
	if out, err := exec.Command(openssl, "x509", "-in", certFile, "-pubkey", "-noout", "-out", p("pub.pem")).CombinedOutput(); err != nil {
		return fmt.Errorf("openssl x509: %v: %s", err, out)
	}
	if out, err := exec.Command(openssl, "dgst", "-sha256", "-verify", p("pub.pem"), "-signature", p("sig.bin"), p("signedinfo.c14n")).CombinedOutput(); err != nil {
		return fmt.Errorf("openssl dgst -verify over SignedInfo: %v: %s", err, out)
	}
	return nil
}
