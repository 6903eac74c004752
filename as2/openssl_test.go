package as2

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/mdn"
)

var (
	opensslCompressOnce sync.Once
	opensslCompressErr  error
)

// openssl runs the openssl CLI and returns its standard output.
func openssl(t *testing.T, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("openssl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), nil
}

// TestOpenSSLSenderMatrix builds every combination with the openssl CLI as
// an independent S/MIME implementation (openssl cms -sign makes the
// multipart/signed entity, -encrypt the enveloped-data, -compress the
// compressed-data) and sends each twice.
func TestOpenSSLSenderMatrix(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl CLI not installed (CI needs it for the independent-sender matrix)")
		}
		t.Skip("openssl CLI not found; skipping the independent-sender matrix")
	}
	k := getKeys(t)
	e := newEnv(t, envOptions{})
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(k.p1.Key)
	if err != nil {
		t.Fatal(err)
	}
	signerKey := filepath.Join(dir, "partner.key")
	os.WriteFile(signerKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	signerCert := filepath.Join(dir, "partner.pem")
	writeCertPEM(t, signerCert, k.p1.Cert)
	rcptCert := filepath.Join(dir, "gateway.pem")
	writeCertPEM(t, rcptCert, k.gw1.Cert)

	ciphers := map[string]string{"3des": "-des3", "aes128-cbc": "-aes128", "aes256-cbc": "-aes256", "aes128-gcm": "-aes-128-gcm"}
	hashes := map[string]crypto.Hash{"sha1": crypto.SHA1, "sha256": crypto.SHA256, "sha512": crypto.SHA512}
	for _, sign := range []string{"", "sha1", "sha256", "sha512"} {
		for _, enc := range []string{"", "3des", "aes128-cbc", "aes256-cbc", "aes128-gcm"} {
			for _, compress := range []bool{false, true} {
				for _, mode := range []as2client.MDNMode{as2client.MDNSync, as2client.MDNAsync} {
					name := fmt.Sprintf("sign=%s/enc=%s/compress=%v/mdn=%s", orNone(sign), orNone(enc), compress, mode)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						payload := []byte("UNB+UNOC:3+ACME+GATEWAY+260101:1200+" + name + "'\nUNZ+1+1'\n\x00\xff")
						entity := append([]byte("Content-Type: application/edi-consent\r\nContent-Transfer-Encoding: binary\r\n"+
							"Content-Disposition: attachment; filename=\"order.edi\"\r\n\r\n"), payload...)
						cur := entity
						if compress {
							opensslCompressOnce.Do(func() {
								_, opensslCompressErr = openssl(t, []byte("probe"), "cms", "-compress", "-binary", "-outform", "DER")
							})
							if opensslCompressErr != nil {
								t.Skipf("this openssl cannot compress (built without zlib): %v", opensslCompressErr)
							}
							der, err := openssl(t, entity, "cms", "-compress", "-binary", "-outform", "DER")
							if err != nil {
								t.Fatal(err)
							}
							cur = append([]byte("Content-Type: application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z\r\n"+
								"Content-Transfer-Encoding: binary\r\n\r\n"), der...)
						}
						micAlg, micInput := "sha-256", payload
						if enc != "" {
							micInput = entity
						}
						if sign != "" {
							micInput = cur
							micAlg = map[string]string{"sha1": "sha-1", "sha256": "sha-256", "sha512": "sha-512"}[sign]
							out, err := openssl(t, cur, "cms", "-sign", "-binary", "-signer", signerCert, "-inkey", signerKey,
								"-md", sign, "-outform", "SMIME", "-crlfeol")
							if err != nil {
								t.Fatal(err)
							}
							cur = out
						}
						h := http.Header{}
						var body []byte
						if enc != "" {
							der, err := openssl(t, cur, "cms", "-encrypt", "-binary", "-outform", "DER", ciphers[enc], rcptCert)
							if err != nil {
								t.Fatal(err)
							}
							h.Set("Content-Type", "application/pkcs7-mime; smime-type=enveloped-data; name=smime.p7m")
							body = der
						} else {
							i := bytes.Index(cur, []byte("\r\n\r\n"))
							for _, line := range strings.Split(string(cur[:i]), "\r\n") {
								n, v, _ := strings.Cut(line, ":")
								h.Set(n, strings.TrimSpace(v))
							}
							body = cur[i+4:]
						}
						hh := hashes[strings.ReplaceAll(micAlg, "-", "")]
						d := hh.New()
						d.Write(micInput)
						msg := &as2client.Message{ID: "<openssl-" + strings.NewReplacer("/", "-", "=", "-").Replace(name) + "@acme>",
							MIC: base64.StdEncoding.EncodeToString(d.Sum(nil)), MICAlg: micAlg}
						h.Set("AS2-From", "ACME")
						h.Set("AS2-To", "GATEWAY")
						h.Set("AS2-Version", "1.2")
						h.Set("Message-Id", msg.ID)
						h.Set("Disposition-Notification-To", "as2@acme.example")
						h.Set("Disposition-Notification-Options", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, "+micAlg)
						if mode == as2client.MDNAsync {
							h.Set("Receipt-Delivery-Option", e.mdns.srv.URL+"/mdn")
						}
						checker := &as2client.Client{MDNCerts: []*x509.Certificate{k.gw1.Cert}, SignedMDN: true}
						for n, want := range []mdn.Disposition{mdn.DispProcessed, mdn.DispDuplicateDocument} {
							resp, rb := e.post(t, h.Clone(), body)
							if resp.StatusCode != 200 {
								t.Fatalf("send %d: HTTP %d %s", n+1, resp.StatusCode, rb)
							}
							var ch *as2client.MDNCheck
							if mode == as2client.MDNAsync {
								if len(rb) != 0 {
									t.Fatalf("async answer has a body: %q", rb)
								}
								got := e.mdns.wait(t, msg.ID, n+1)
								ch = checker.CheckMDN(msg, got.header, got.body)
							} else {
								ch = checker.CheckMDN(msg, resp.Header, rb)
							}
							if ch.Disposition.String() != want.String() || !ch.MICMatched || !ch.Verified || len(ch.Problems) > 0 {
								t.Fatalf("send %d: disposition %q, MIC matched %v, verified %v, problems %v", n+1, ch.Disposition, ch.MICMatched, ch.Verified, ch.Problems)
							}
						}
						if n := e.handler.count(msg.ID); n != 1 {
							t.Fatalf("handler ran %d times", n)
						}
						if got := e.handler.payloads(msg.ID); len(got) != 1 || !bytes.Equal(got[0], payload) {
							t.Fatalf("handler got %q", got)
						}
					})
				}
			}
		}
	}
}
