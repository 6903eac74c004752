package client

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/mdn"
)

var (
	pairsOnce sync.Once
	pairs     [2]cms.KeyPair // 0: sender, 1: receiver
	pairsErr  error
)

func keyPairs(t *testing.T) (sender, receiver cms.KeyPair) {
	t.Helper()
	pairsOnce.Do(func() {
		for i := range pairs {
			key, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				pairsErr = err
				return
			}
			tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(100 + i)), Subject: pkix.Name{CommonName: []string{"sender", "receiver"}[i]},
				NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
			if err != nil {
				pairsErr = err
				return
			}
			cert, _ := x509.ParseCertificate(der)
			pairs[i] = cms.KeyPair{Cert: cert, Key: key}
		}
	})
	if pairsErr != nil {
		t.Fatal(pairsErr)
	}
	return pairs[0], pairs[1]
}

// fakePartner unwraps what it receives with package smime and answers with
// an MDN shaped by reply.
type fakePartner struct {
	t       *testing.T
	rcv     cms.KeyPair
	trusted []*x509.Certificate
	mu      sync.Mutex
	header  http.Header
	payload []byte
	reply   func(r *mdn.Report) (sign bool)
}

func (f *fakePartner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	res, err := smime.UnwrapEntity(smime.EntityFromHTTP(r.Header, body), smime.Options{Keys: []cms.KeyPair{f.rcv}, Trusted: f.trusted})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.header, f.payload = r.Header.Clone(), res.Payload
	f.mu.Unlock()
	_, _, micalgs, _ := parseOptions(r.Header.Get("Disposition-Notification-Options"))
	alg := "sha-256"
	if len(micalgs) > 0 {
		alg = micalgs[0]
	}
	mic, _ := res.MIC(alg)
	rep := mdn.Report{ReportingUA: "fake", OriginalMessageID: r.Header.Get("Message-Id"), MIC: mic, MICAlg: alg,
		Disposition: mdn.DispProcessed, AS2From: "THEM", AS2To: "US", MessageID: "<mdn@them>"}
	sign := f.reply(&rep)
	h := rep.Headers()
	var ct string
	var out []byte
	if sign {
		ct, out, err = mdn.Sign(mdn.BuildEntity(rep), "sha-256", func(c []byte) ([]byte, error) {
			return cms.SignDetached(c, f.rcv.Cert, f.rcv.Key, "sha256")
		})
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
	} else {
		ct, out = mdn.Build(rep)
	}
	h.Set("Content-Type", ct)
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Write(out)
}

// parseOptions is a minimal reader of Disposition-Notification-Options.
func parseOptions(v string) (string, bool, []string, bool) {
	for _, p := range strings.Split(v, ";") {
		name, val, _ := strings.Cut(p, "=")
		if strings.TrimSpace(name) == "signed-receipt-micalg" {
			items := strings.Split(val, ",")
			var out []string
			for _, it := range items[1:] {
				out = append(out, strings.TrimSpace(it))
			}
			return "", false, out, false
		}
	}
	return "", false, nil, false
}

func TestSendChecksTheMDN(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "Prepare", true: "PrepareStream"}[stream], func(t *testing.T) { testSendChecksTheMDN(t, stream) })
	}
}

func testSendChecksTheMDN(t *testing.T, stream bool) {
	snd, rcv := keyPairs(t)
	fp := &fakePartner{t: t, rcv: rcv, trusted: []*x509.Certificate{snd.Cert}}
	srv := httptest.NewServer(fp)
	defer srv.Close()
	var progress []int64
	c := &Client{URL: srv.URL, From: "Us Inc", To: "THEM", SignCert: snd.Cert, SignKey: snd.Key, SignDigest: "sha512",
		RecipientCerts: []*x509.Certificate{rcv.Cert}, Cipher: "aes256-gcm", SignedMDN: true,
		Progress: func(sent, total int64) { progress = append(progress, sent, total) }, SpoolDir: t.TempDir()}
	var m *Message
	var err error
	if stream {
		m, err = c.PrepareStream(strings.NewReader("UNB+1'\x00\xff"), "application/edifact", "o.edi")
		if left, _ := os.ReadDir(c.SpoolDir); len(left) != 0 || m.Body != nil {
			t.Fatalf("the spool file is not unlinked at once (%v) or the body is in memory", left)
		}
		defer m.Close()
	} else {
		m, err = c.Prepare([]byte("UNB+1'\x00\xff"), "application/edifact", "o.edi")
	}
	if err != nil {
		t.Fatal(err)
	}
	if m.MICAlg != "sha-512" || !strings.HasPrefix(m.ID, "<") || !strings.HasSuffix(m.ID, "@UsInc>") {
		t.Fatalf("prepared %s %s", m.ID, m.MICAlg)
	}

	for _, tc := range []struct {
		name    string
		reply   func(r *mdn.Report) bool
		problem string
	}{
		{"positive", func(r *mdn.Report) bool { return true }, ""},
		{"unsigned", func(r *mdn.Report) bool { return false }, "not signed"},
		{"wrong message", func(r *mdn.Report) bool { r.OriginalMessageID = "<other@x>"; return true }, "Original-Message-ID"},
		{"wrong MIC", func(r *mdn.Report) bool { r.MIC = "AAAA"; return true }, "does not match"},
		{"negative", func(r *mdn.Report) bool { r.Disposition = mdn.DispDecryptionFailed; r.MIC = ""; return true }, "decryption-failed"},
	} {
		fp.reply = tc.reply
		progress = nil
		res, err := c.Send(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		if tc.problem == "" {
			if !res.OK() || !res.MDN.Verified || !res.MDN.MICMatched || !res.MDN.Signer.Equal(rcv.Cert) {
				t.Fatalf("%s: %+v %+v", tc.name, res, res.MDN)
			}
		} else if res.OK() || !strings.Contains(strings.Join(res.Problems, "|"), tc.problem) {
			t.Fatalf("%s: problems %q", tc.name, res.Problems)
		}
		if res.BytesSent != m.Size() || m.Size() < 1000 || len(progress) < 2 || progress[len(progress)-2] != m.Size() {
			t.Fatalf("%s: sent %d, progress %v", tc.name, res.BytesSent, progress)
		}
	}
	fp.mu.Lock()
	h, payload := fp.header, fp.payload
	fp.mu.Unlock()
	if string(payload) != "UNB+1'\x00\xff" || h.Get("AS2-From") != `"Us Inc"` || h.Get("AS2-To") != "THEM" || h.Get("AS2-Version") != "1.2" ||
		h.Get("Disposition-Notification-Options") != "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-512" ||
		h.Get("Receipt-Delivery-Option") != "" || h.Get("Message-Id") != m.ID {
		t.Fatalf("partner got %q with %v", payload, h)
	}

	// A signature by another certificate is not verified.
	c.MDNCerts = []*x509.Certificate{snd.Cert}
	fp.reply = func(*mdn.Report) bool { return true }
	res, _ := c.Send(context.Background(), m)
	if res.OK() || res.MDN.Verified || !strings.Contains(strings.Join(res.Problems, "|"), "MDN signature") {
		t.Fatalf("foreign signer: %+v", res.Problems)
	}
}

func TestHTTPErrorIsAProblem(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL, From: "A", To: "B", MDN: MDNAsync, AsyncURL: "http://me/mdn"}
	m, err := c.Prepare([]byte("x"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Receipt-Delivery-Option") != "http://me/mdn" || m.Header.Get("Disposition-Notification-Options") != "" {
		t.Fatalf("headers %v", m.Header)
	}
	res, err := c.Send(context.Background(), m)
	if err != nil || res.OK() || res.Status != 503 || res.RetryAfter != 3*time.Second || !strings.Contains(res.Problems[0], "busy") {
		t.Fatalf("%v %+v", err, res)
	}
	if _, err := (&Client{From: "A", To: "B", MDN: MDNAsync}).Prepare([]byte("x"), "", ""); err == nil {
		t.Fatal("async without URL accepted")
	}
	if _, err := (&Client{From: "A", To: "B", Cipher: "aes128-cbc"}).Prepare([]byte("x"), "", ""); err == nil {
		t.Fatal("encryption without certificate accepted")
	}
}

func TestQuoteName(t *testing.T) {
	for in, want := range map[string]string{"ACME": "ACME", "ACME Corp": `"ACME Corp"`, `a"b\c`: `"a\"b\\c"`, "a;b": `"a;b"`, "": `""`} {
		if got := QuoteName(in); got != want {
			t.Errorf("QuoteName(%q) = %s, want %s", in, got, want)
		}
	}
}
