package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/submitapi"
)

// needTool returns the path of a tool that is not our code (openssl,
// xmlsec1), skipping the test without it, failing under CI (.ci/run
// installs both).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed (.ci/run installs it)", name)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

// runTool runs a tool, failing the test with its output on error.
func runTool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		return nil
	}
	return out
}

// foreignAS2 is an AS2 partner built from openssl alone: it decrypts what
// our sender posts with the partner's key, verifies its signature with our
// certificate, recomputes the MIC from the signed MIME entity itself, and
// answers an MDN it writes by hand (RFC 3798 multipart/report, RFC 4130
// Received-Content-MIC) signed with `openssl cms -sign`. The AS2 Subject
// picks a flaw: "good", "tamper" (the signed MDN changed after signing),
// "mic" (a MIC over other bytes), "otherkey" (signed by a key the sender
// does not know).
type foreignAS2 struct {
	dir, addr string
	mu        sync.Mutex
	checked   map[string]error // subject → what verifying the request came to
	mics      map[string]string
	mdns      map[string][]byte // subject → the MDN answered (HTTP body)
}

func newForeignAS2(t *testing.T, openssl string) *foreignAS2 {
	t.Helper()
	f := &foreignAS2{dir: t.TempDir(), checked: map[string]error{}, mics: map[string]string{}, mdns: map[string][]byte{}}
	// The key nobody told the sender about.
	runTool(t, openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=not the partner",
		"-keyout", filepath.Join(f.dir, "other.key"), "-out", filepath.Join(f.dir, "other.pem"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serve(t, openssl, w, r) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *foreignAS2) serve(t *testing.T, openssl string, w http.ResponseWriter, r *http.Request) {
	fixture := filepath.Dir(demoConfig(t))
	partnerCert, partnerKey := filepath.Join(fixture, "partners", "demo-partner.pem"), filepath.Join(fixture, "keys", "demo-partner.key")
	ourCert := filepath.Join(fixture, "keys", "gateway.pem")
	subject := r.Header.Get("Subject")
	body, _ := io.ReadAll(r.Body)
	dir, err := os.MkdirTemp(f.dir, subject+"-")
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	os.WriteFile(p("request.der"), body, 0o600)
	check := func() (string, error) {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/pkcs7-mime" {
			return "", fmt.Errorf("content type %q, not an encrypted message", r.Header.Get("Content-Type"))
		}
		if out, err := exec.Command(openssl, "cms", "-decrypt", "-binary", "-inform", "DER", "-in", p("request.der"),
			"-recip", partnerCert, "-inkey", partnerKey, "-out", p("signed.mime")).CombinedOutput(); err != nil {
			return "", fmt.Errorf("openssl cms -decrypt: %v: %s", err, out)
		}
		if out, err := exec.Command(openssl, "cms", "-verify", "-inform", "SMIME", "-in", p("signed.mime"),
			"-CAfile", ourCert, "-out", p("content")).CombinedOutput(); err != nil {
			return "", fmt.Errorf("openssl cms -verify: %v: %s", err, out)
		}
		signed, _ := os.ReadFile(p("signed.mime"))
		entity, err := firstPart(signed)
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256(entity)
		return base64.StdEncoding.EncodeToString(sum[:]) + ", sha-256", nil
	}
	mic, err := check()
	f.mu.Lock()
	f.checked[subject], f.mics[subject] = err, mic
	f.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if subject == "mic" {
		sum := sha256.Sum256(append([]byte("other bytes"), body...))
		mic = base64.StdEncoding.EncodeToString(sum[:]) + ", sha-256"
	}
	report := strings.ReplaceAll(`Content-Type: multipart/report; report-type=disposition-notification; boundary="foreign-report"

--foreign-report
Content-Type: text/plain; charset=us-ascii

The message was received and verified by a partner built on openssl.
--foreign-report
Content-Type: message/disposition-notification

Reporting-UA: openssl interop stub
Original-Recipient: rfc822; FOREIGN
Final-Recipient: rfc822; FOREIGN
Original-Message-ID: `+r.Header.Get("Message-Id")+`
Received-Content-MIC: `+mic+`
Disposition: automatic-action/MDN-sent-automatically; processed

--foreign-report--
`, "\n", "\r\n")
	os.WriteFile(p("report.mime"), []byte(report), 0o600)
	signer, key := partnerCert, partnerKey
	if subject == "otherkey" {
		signer, key = filepath.Join(f.dir, "other.pem"), filepath.Join(f.dir, "other.key")
	}
	out, err := exec.Command(openssl, "cms", "-sign", "-binary", "-md", "sha256", "-in", p("report.mime"),
		"-signer", signer, "-inkey", key, "-outform", "SMIME", "-out", p("mdn.smime")).CombinedOutput()
	if err != nil {
		http.Error(w, fmt.Sprintf("openssl cms -sign: %v: %s", err, out), 500)
		return
	}
	smime, _ := os.ReadFile(p("mdn.smime"))
	head, mdn, ok := bytes.Cut(bytes.ReplaceAll(smime, []byte("\r\n"), []byte("\n")), []byte("\n\n"))
	if !ok {
		http.Error(w, "openssl wrote no headers", 500)
		return
	}
	mdn = bytes.ReplaceAll(mdn, []byte("\n"), []byte("\r\n"))
	if subject == "tamper" {
		mdn = bytes.Replace(mdn, []byte("was received"), []byte("was RECEIVED"), 1)
	}
	for _, line := range strings.Split(string(head), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			w.Header().Set(k, strings.TrimSpace(v))
		}
	}
	f.mu.Lock()
	f.mdns[subject] = mdn
	f.mu.Unlock()
	w.Header().Set("AS2-From", "FOREIGN")
	w.Header().Set("AS2-To", r.Header.Get("AS2-From"))
	w.Header().Set("AS2-Version", "1.2")
	w.Write(mdn)
}

// firstPart is the first body part of a multipart/signed entity, headers
// and content, byte for byte: what the MIC is computed over (RFC 4130
// §7.3.1).
func firstPart(entity []byte) ([]byte, error) {
	head, _, ok := bytes.Cut(entity, []byte("\r\n\r\n"))
	if !ok {
		head, _, ok = bytes.Cut(entity, []byte("\n\n"))
	}
	if !ok {
		return nil, fmt.Errorf("no header in the signed entity")
	}
	var ct string
	for _, line := range strings.Split(strings.ReplaceAll(string(head), "\r\n ", " "), "\n") {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":"); ok && strings.EqualFold(k, "Content-Type") {
			ct = strings.TrimSpace(v)
		}
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/signed" || params["boundary"] == "" {
		return nil, fmt.Errorf("signed entity of type %q", ct)
	}
	delim := []byte("--" + params["boundary"] + "\r\n")
	_, rest, ok := bytes.Cut(entity, delim)
	if !ok {
		return nil, fmt.Errorf("no first boundary")
	}
	part, _, ok := bytes.Cut(rest, []byte("\r\n--"+params["boundary"]))
	if !ok {
		return nil, fmt.Errorf("no closing boundary of the first part")
	}
	return part, nil
}

// TestSendAS2InteropWithOpenSSL: what the real gateway binary posts to an
// AS2 partner is decrypted and verified by openssl with the partner's key
// and our certificate, and the MIC the partner recomputes on its own is
// the one the gateway expects: a hand-written MDN signed by `openssl cms
// -sign` over that MIC delivers the message (its evidence kept byte for
// byte). A tampered MDN, one with a MIC over other bytes, and one signed
// by a key the partner file does not name leave their messages not
// delivered: queued for another attempt, with the reason.
func TestSendAS2InteropWithOpenSSL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the gateway binary")
	}
	openssl := needTool(t, "openssl")
	partner := newForeignAS2(t, openssl)
	gw := startObSender(t, map[string]string{
		"foreign.yaml": partnerYAML("foreign", "FOREIGN", "http://"+partner.addr+"/as2", "10s", "1h"),
	})
	subs := map[string]submitapi.Status{}
	for _, s := range []string{"good", "tamper", "mic", "otherkey"} {
		// Text without line ends: openssl's S/MIME reader re-ends the
		// lines of a multipart/signed part, so it cannot verify random
		// binary content (a bare LF becomes CRLF); we send it as it is.
		subs[s] = gw.submit(t, "foreign", "&subject="+s, []byte(hex.EncodeToString(opaque(2048))))
	}
	st := gw.waitStatus(t, subs["good"].ID, 20*time.Second, "final", func(st submitapi.Status) bool { return st.Final })
	partner.mu.Lock()
	checkErr, mic := partner.checked["good"], partner.mics["good"]
	partner.mu.Unlock()
	if checkErr != nil {
		t.Fatalf("openssl on what we sent: %v", checkErr)
	}
	if st.State != "delivered" || st.Attempts != 1 || st.Evidence == nil || st.Evidence.Kind != "mdn" || !strings.Contains(st.Evidence.Signer, "demo") {
		t.Fatalf("an MDN signed by openssl over the MIC it recomputed (%s): state %s, attempts %d, reason %q, last_error %q, evidence %+v",
			mic, st.State, st.Attempts, st.Reason, st.LastError, st.Evidence)
	}
	resp, err := http.Get("http://" + gw.admin + st.Evidence.URL)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	partner.mu.Lock()
	answered := partner.mdns["good"]
	partner.mu.Unlock()
	if !bytes.Equal(ev, answered) {
		t.Errorf("evidence kept is not the MDN answered (%d and %d bytes)", len(ev), len(answered))
	}
	t.Logf("delivered on the openssl MDN; the MIC recomputed by the partner: %s", mic)

	for _, s := range []string{"tamper", "mic", "otherkey"} {
		st := gw.waitStatus(t, subs[s].ID, 20*time.Second, "tried", func(st submitapi.Status) bool { return st.Attempts >= 1 && st.LastError != "" })
		partner.mu.Lock()
		checkErr := partner.checked[s]
		partner.mu.Unlock()
		if checkErr != nil {
			t.Errorf("%s: openssl on what we sent: %v", s, checkErr)
		}
		if (st.State != "queued" && st.State != "sending") || st.Final || st.Evidence != nil {
			t.Errorf("%s: state %s, evidence %+v: a bad MDN must leave the message queued", s, st.State, st.Evidence)
		}
		t.Logf("%s: %s after %d attempts; last_error %q", s, st.State, st.Attempts, st.LastError)
		if !containsAny(st.LastError, map[string][]string{"tamper": {"signature", "verif"}, "mic": {"mic"}, "otherkey": {"signature", "signer", "certificate", "verif"}}[s]...) {
			t.Errorf("%s: last_error %q does not say what was wrong", s, st.LastError)
		}
	}
}
