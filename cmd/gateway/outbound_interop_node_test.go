package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/internal/brainpool/bptest"
)

// nodeDecrypt is the decryption of an AS4 attachment encrypted under WS-Security
// (SwA Attachment-Content-Only), written for Node.js: every cryptographic step
// is Node's crypto module (OpenSSL) or zlib, none is our code. It reads the
// JSON the Go test extracted from the envelope (algorithm URIs, CipherValue,
// ConcatKDFParams, the originator's public key) and the attachment part, and
// prints the SHA-256 of the plaintext after gunzip. RSA-OAEP with an MGF1
// digest other than the OAEP digest (rsa-oaep-mgf1p with SHA-256: MGF1 is
// SHA-1) is not an option of crypto.privateDecrypt, whose MGF1 always uses
// oaepHash: the raw RSA operation is OpenSSL's (RSA_NO_PADDING) and the OAEP
// decoding of RFC 8017 §7.1.2 is done here with OpenSSL's hashes.
const nodeDecrypt = `'use strict';
const crypto = require('crypto'), fs = require('fs'), zlib = require('zlib');
const p = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const die = (m) => { process.stderr.write(m + '\n'); process.exit(2); };
const hashes = {
  'http://www.w3.org/2000/09/xmldsig#sha1': 'sha1',
  'http://www.w3.org/2001/04/xmlenc#sha256': 'sha256',
  'http://www.w3.org/2001/04/xmldsig-more#sha384': 'sha384',
  'http://www.w3.org/2001/04/xmlenc#sha512': 'sha512',
};
const mgfs = {
  'http://www.w3.org/2009/xmlenc11#mgf1sha1': 'sha1',
  'http://www.w3.org/2009/xmlenc11#mgf1sha256': 'sha256',
  'http://www.w3.org/2009/xmlenc11#mgf1sha384': 'sha384',
  'http://www.w3.org/2009/xmlenc11#mgf1sha512': 'sha512',
};
const wraps = {
  'http://www.w3.org/2001/04/xmlenc#kw-aes128': ['id-aes128-wrap', 16],
  'http://www.w3.org/2001/04/xmlenc#kw-aes192': ['id-aes192-wrap', 24],
  'http://www.w3.org/2001/04/xmlenc#kw-aes256': ['id-aes256-wrap', 32],
};
const gcms = {
  'http://www.w3.org/2009/xmlenc11#aes128-gcm': 'aes-128-gcm',
  'http://www.w3.org/2009/xmlenc11#aes192-gcm': 'aes-192-gcm',
  'http://www.w3.org/2009/xmlenc11#aes256-gcm': 'aes-256-gcm',
};
const key = crypto.createPrivateKey(fs.readFileSync(p.keyFile));
const wrapped = Buffer.from(p.cipherValue, 'base64');

function mgf1(h, seed, len) {
  const out = [];
  for (let i = 0, n = 0; n < len; i++) {
    const c = Buffer.alloc(4); c.writeUInt32BE(i);
    const d = crypto.createHash(h).update(seed).update(c).digest();
    out.push(d); n += d.length;
  }
  return Buffer.concat(out).subarray(0, len);
}
function oaepDecode(em, h, m) {
  const hLen = crypto.createHash(h).digest().length;
  const xor = (a, b) => Buffer.from(a.map((x, i) => x ^ b[i]));
  if (em[0] !== 0) die('OAEP: first octet not 0');
  const maskedSeed = em.subarray(1, 1 + hLen), maskedDB = em.subarray(1 + hLen);
  const seed = xor(maskedSeed, mgf1(m, maskedDB, hLen));
  const db = xor(maskedDB, mgf1(m, seed, maskedDB.length));
  if (!db.subarray(0, hLen).equals(crypto.createHash(h).update(Buffer.alloc(0)).digest())) die('OAEP: label hash differs');
  let i = hLen;
  while (i < db.length && db[i] === 0) i++;
  if (db[i] !== 1) die('OAEP: no 0x01 separator');
  return db.subarray(i + 1);
}
function bitString(hex, name) {
  if (hex === undefined || hex === '') return Buffer.alloc(0);
  const b = Buffer.from(hex, 'hex');
  if (b.length === 0 || b[0] !== 0) die('ConcatKDFParams ' + name + ': not a whole-octet bit string');
  return b.subarray(1);
}

let cek;
if (p.keyAlg === 'http://www.w3.org/2001/04/xmlenc#rsa-oaep-mgf1p' || p.keyAlg === 'http://www.w3.org/2009/xmlenc11#rsa-oaep') {
  const h = hashes[p.oaepDigest || 'http://www.w3.org/2000/09/xmldsig#sha1'];
  const m = p.keyAlg.endsWith('mgf1p') ? 'sha1' : mgfs[p.mgf || 'http://www.w3.org/2009/xmlenc11#mgf1sha1'];
  if (!h || !m) die('OAEP digest ' + p.oaepDigest + ' / MGF ' + p.mgf);
  if (h === m) {
    cek = crypto.privateDecrypt({ key, padding: crypto.constants.RSA_PKCS1_OAEP_PADDING, oaepHash: h }, wrapped);
  } else {
    cek = oaepDecode(crypto.privateDecrypt({ key, padding: crypto.constants.RSA_NO_PADDING }, wrapped), h, m);
  }
} else if (wraps[p.keyAlg]) {
  const [wrapCipher, kekLen] = wraps[p.keyAlg];
  if (p.agreement !== 'http://www.w3.org/2009/xmlenc11#ECDH-ES') die('agreement ' + p.agreement);
  if (p.kdf !== 'http://www.w3.org/2009/xmlenc11#ConcatKDF') die('key derivation ' + p.kdf);
  if (p.namedCurve !== 'urn:oid:1.3.36.3.3.2.8.1.1.7') die('curve ' + p.namedCurve);
  const kdfHash = hashes[p.kdfDigest];
  if (!kdfHash) die('ConcatKDF digest ' + p.kdfDigest);
  // SubjectPublicKeyInfo of an uncompressed brainpoolP256r1 point.
  const point = Buffer.from(p.originatorKey, 'base64');
  if (point.length !== 65 || point[0] !== 4) die('originator key is not an uncompressed P-256 sized point');
  const spki = Buffer.concat([Buffer.from('305a301406072a8648ce3d020106092b2403030208010107034200', 'hex'), point]);
  const pub = crypto.createPublicKey({ key: spki, format: 'der', type: 'spki' });
  const z = crypto.diffieHellman({ privateKey: key, publicKey: pub });
  // OtherInfo = AlgorithmID || PartyUInfo || PartyVInfo (XML Encryption 1.1 §5.4.1).
  const otherInfo = Buffer.concat([bitString(p.algorithmID, 'AlgorithmID'), bitString(p.partyUInfo, 'PartyUInfo'),
    bitString(p.partyVInfo, 'PartyVInfo'), bitString(p.suppPubInfo, 'SuppPubInfo'), bitString(p.suppPrivInfo, 'SuppPrivInfo')]);
  const ks = [];
  for (let i = 1, n = 0; n < kekLen; i++) {
    const c = Buffer.alloc(4); c.writeUInt32BE(i);
    const d = crypto.createHash(kdfHash).update(c).update(z).update(otherInfo).digest();
    ks.push(d); n += d.length;
  }
  const kek = Buffer.concat(ks).subarray(0, kekLen);
  const d = crypto.createDecipheriv(wrapCipher, kek, Buffer.from('A6A6A6A6A6A6A6A6', 'hex'));
  cek = Buffer.concat([d.update(wrapped), d.final()]);
} else {
  die('key algorithm ' + p.keyAlg);
}

const gcm = gcms[p.dataAlg];
if (!gcm) die('content encryption ' + p.dataAlg);
if (p.dataType !== 'http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Only') die('EncryptedData Type ' + p.dataType);
const att = fs.readFileSync(p.attachmentFile);
const iv = att.subarray(0, 12), tag = att.subarray(att.length - 16), ct = att.subarray(12, att.length - 16);
const dec = crypto.createDecipheriv(gcm, cek, iv);
dec.setAuthTag(tag);
const compressed = Buffer.concat([dec.update(ct), dec.final()]);
const plain = zlib.gunzipSync(compressed);
process.stdout.write(crypto.createHash('sha256').update(plain).digest('hex') + '\n');
`

// nodeParams is what the Go test takes out of the envelope for nodeDecrypt:
// bytes and URIs, no cryptography.
type nodeParams struct {
	KeyFile        string `json:"keyFile"`
	AttachmentFile string `json:"attachmentFile"`
	KeyAlg         string `json:"keyAlg"`
	OAEPDigest     string `json:"oaepDigest,omitempty"`
	MGF            string `json:"mgf,omitempty"`
	CipherValue    string `json:"cipherValue"`
	Agreement      string `json:"agreement,omitempty"`
	KDF            string `json:"kdf,omitempty"`
	KDFDigest      string `json:"kdfDigest,omitempty"`
	AlgorithmID    string `json:"algorithmID,omitempty"`
	PartyUInfo     string `json:"partyUInfo,omitempty"`
	PartyVInfo     string `json:"partyVInfo,omitempty"`
	SuppPubInfo    string `json:"suppPubInfo,omitempty"`
	SuppPrivInfo   string `json:"suppPrivInfo,omitempty"`
	NamedCurve     string `json:"namedCurve,omitempty"`
	OriginatorKey  string `json:"originatorKey,omitempty"`
	DataAlg        string `json:"dataAlg"`
	DataType       string `json:"dataType"`

	hasPartyU, hasPartyV bool
}

// posted is one AS4 message as a stub partner received it.
type posted struct {
	envelope    []byte
	attachments map[string][]byte // by "cid:…"
	err         error
}

// capturingAS4 is a partner that keeps the first message posted and answers
// 503 (the message stays queued: nothing more is needed of the gateway).
func capturingAS4(tls bool) (*httptest.Server, <-chan posted) {
	got := make(chan posted, 1)
	var once sync.Once
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := posted{attachments: map[string][]byte{}}
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/related" {
			c.err = fmt.Errorf("content type %q", r.Header.Get("Content-Type"))
		} else {
			mr := multipart.NewReader(r.Body, params["boundary"])
			for i := 0; ; i++ {
				part, err := mr.NextRawPart()
				if err != nil {
					if err != io.EOF {
						c.err = err
					}
					break
				}
				b, _ := io.ReadAll(part)
				if i == 0 {
					c.envelope = b
				} else {
					c.attachments["cid:"+strings.Trim(part.Header.Get("Content-Id"), "<>")] = b
				}
			}
		}
		once.Do(func() { got <- c })
		http.Error(w, "try again later", http.StatusServiceUnavailable)
	})
	if tls {
		return httptest.NewTLSServer(h), got
	}
	return httptest.NewServer(h), got
}

// extractForNode takes out of the envelope what nodeDecrypt needs for the
// one encrypted attachment, and writes that attachment to dir.
func extractForNode(c posted, keyFile, dir string) (nodeParams, error) {
	p := nodeParams{KeyFile: keyFile}
	doc := etree.NewDocument()
	if err := doc.ReadFromBytes(c.envelope); err != nil {
		return p, fmt.Errorf("envelope: %w", err)
	}
	attr := func(e *etree.Element, path, name string) string {
		if e = e.FindElement(path); e == nil {
			return ""
		}
		return e.SelectAttrValue(name, "")
	}
	eks := doc.FindElements("//EncryptedKey")
	eds := doc.FindElements("//EncryptedData")
	if len(eks) != 1 || len(eds) != 1 || len(c.attachments) != 1 {
		return p, fmt.Errorf("%d EncryptedKey, %d EncryptedData, %d attachments: want one of each", len(eks), len(eds), len(c.attachments))
	}
	ek, ed := eks[0], eds[0]
	p.KeyAlg = attr(ek, "EncryptionMethod", "Algorithm")
	p.OAEPDigest = attr(ek, "EncryptionMethod/DigestMethod", "Algorithm")
	p.MGF = attr(ek, "EncryptionMethod/MGF", "Algorithm")
	if cv := ek.FindElement("CipherData/CipherValue"); cv != nil {
		p.CipherValue = strings.Join(strings.Fields(cv.Text()), "")
	}
	p.Agreement = attr(ek, ".//AgreementMethod", "Algorithm")
	p.KDF = attr(ek, ".//KeyDerivationMethod", "Algorithm")
	p.KDFDigest = attr(ek, ".//ConcatKDFParams/DigestMethod", "Algorithm")
	if kp := ek.FindElement(".//ConcatKDFParams"); kp != nil {
		p.AlgorithmID = kp.SelectAttrValue("AlgorithmID", "")
		p.PartyUInfo, p.PartyVInfo = kp.SelectAttrValue("PartyUInfo", ""), kp.SelectAttrValue("PartyVInfo", "")
		p.SuppPubInfo, p.SuppPrivInfo = kp.SelectAttrValue("SuppPubInfo", ""), kp.SelectAttrValue("SuppPrivInfo", "")
		p.hasPartyU, p.hasPartyV = kp.SelectAttr("PartyUInfo") != nil, kp.SelectAttr("PartyVInfo") != nil
	}
	p.NamedCurve = attr(ek, ".//OriginatorKeyInfo//NamedCurve", "URI")
	if pk := ek.FindElement(".//OriginatorKeyInfo//PublicKey"); pk != nil {
		p.OriginatorKey = strings.Join(strings.Fields(pk.Text()), "")
	}
	p.DataAlg = attr(ed, "EncryptionMethod", "Algorithm")
	p.DataType = ed.SelectAttrValue("Type", "")
	uri := attr(ed, "CipherData/CipherReference", "URI")
	att, ok := c.attachments[uri]
	if !ok {
		return p, fmt.Errorf("CipherReference %q names no attachment", uri)
	}
	p.AttachmentFile = filepath.Join(dir, "attachment.bin")
	return p, os.WriteFile(p.AttachmentFile, att, 0o600)
}

// runNodeDecrypt writes p and the script to dir and runs node on them; it
// returns what node printed (the plaintext's SHA-256 in hex).
func runNodeDecrypt(node, dir string, p nodeParams) (string, error) {
	js, pj := filepath.Join(dir, "decrypt.js"), filepath.Join(dir, "params.json")
	b, _ := json.Marshal(p)
	if err := os.WriteFile(pj, b, 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(js, []byte(nodeDecrypt), 0o600); err != nil {
		return "", err
	}
	out, err := exec.Command(node, js, pj).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("node: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// checkNodeDecrypts asserts node decrypts the posted attachment to payload,
// and fails on the same attachment with one byte changed (the GCM tag).
func checkNodeDecrypts(t *testing.T, node string, p nodeParams, payload []byte) {
	t.Helper()
	dir := filepath.Dir(p.AttachmentFile)
	sum := sha256.Sum256(payload)
	got, err := runNodeDecrypt(node, dir, p)
	if err != nil {
		t.Fatalf("node could not decrypt what we sent: %v", err)
	}
	if got != hex.EncodeToString(sum[:]) {
		t.Fatalf("node decrypted to sha256 %s, the payload submitted is %x", got, sum)
	}
	att, _ := os.ReadFile(p.AttachmentFile)
	att[len(att)/2] ^= 0x01
	os.WriteFile(p.AttachmentFile, att, 0o600)
	if got, err := runNodeDecrypt(node, dir, p); err == nil {
		t.Fatalf("node decrypted a tampered attachment (sha256 %s)", got)
	} else if !containsAny(err.Error(), "authenticate") {
		t.Fatalf("tampered attachment: node failed otherwise than on the GCM tag: %v", err)
	}
}

func needNode(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the gateway binary")
	}
	return needTool(t, "node")
}

func waitPosted(t *testing.T, got <-chan posted) posted {
	t.Helper()
	select {
	case c := <-got:
		if c.err != nil {
			t.Fatal(c.err)
		}
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway posted nothing in 30s")
	}
	return posted{}
}

// TestSendAS4DecryptedByNode: what the real gateway binary posts to an AS4
// partner with the default settings (encrypted for the partner's RSA
// certificate, compressed) is decrypted by Node.js's crypto (OpenSSL) with
// the partner's private key: RSA-OAEP (the SHA-256 digest and the MGF1-SHA-1
// of rsa-oaep-mgf1p), AES-128-GCM (IV ‖ ciphertext ‖ tag), gunzip, to the
// bytes submitted; one attachment byte changed fails the GCM tag.
func TestSendAS4DecryptedByNode(t *testing.T) {
	node := needNode(t)
	srv, got := capturingAS4(false)
	defer srv.Close()
	gw := startObSender(t, map[string]string{"plain4.yaml": `id: plain4
as4:
  party_id: urn:plain:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [demo-partner.pem]
  pmodes: [{id: inv, service: "urn:demo:invoicing", action: Deliver}]
  send:
    url: "` + srv.URL + `/as4"
    pmode: {id: inv}
    timeout: 10s
    retry: {first: 1s, factor: 2, max: 4s, give_up_after: 1h}
`})
	payload := opaque(200_000)
	gw.submit(t, "plain4", "", payload)
	c := waitPosted(t, got)
	key := filepath.Join(filepath.Dir(demoConfig(t)), "keys", "demo-partner.key")
	p, err := extractForNode(c, key, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// What our sender writes for RSA: rsa-oaep-mgf1p (MGF1 with SHA-1) and
	// SHA-256 as the OAEP digest (xmlenc.EncryptOptions defaults).
	if p.KeyAlg != "http://www.w3.org/2001/04/xmlenc#rsa-oaep-mgf1p" || p.OAEPDigest != "http://www.w3.org/2001/04/xmlenc#sha256" || p.MGF != "" {
		t.Errorf("key transport %s, OAEP digest %s, MGF %q", p.KeyAlg, p.OAEPDigest, p.MGF)
	}
	if p.DataAlg != "http://www.w3.org/2009/xmlenc11#aes128-gcm" {
		t.Errorf("content encryption %s", p.DataAlg)
	}
	checkNodeDecrypts(t, node, p, payload)
}

// TestSendAS4BDEWDecryptedByNode: under the BDEW profile, what the real
// gateway binary posts is decrypted by Node.js's crypto (OpenSSL) with the
// partner's brainpoolP256r1 encryption key (made by openssl): ECDH-ES with
// the originator's ephemeral key from the envelope, ConcatKDF SHA-256 over
// the ConcatKDFParams as written (AlgorithmID the kw-aes128 URI, no
// PartyUInfo/PartyVInfo, as WSS4J writes them), AES-128 key unwrap
// (RFC 3394), AES-128-GCM, gunzip, to the EDIFACT submitted; one attachment
// byte changed fails the GCM tag.
func TestSendAS4BDEWDecryptedByNode(t *testing.T) {
	node := needNode(t)
	pki := bptest.New(t)
	us, sw := pki.Party("9900000000001"), pki.Party("9900000000002")
	srv, got := capturingAS4(true)
	defer srv.Close()
	gw := startBDEWSender(t, us, sw, srv)
	ref := fmt.Sprintf("N%d", time.Now().UnixNano()%1e12)
	edi := []byte("UNA:+.? 'UNB+UNOC:3+9900000000001:500+9900000000002:500+261204:1200+" + ref + "'UNH+1+UTILMD:D:11A:UN:S2.1'UNT+2+1'UNZ+1+" + ref + "'")
	gw.submit(t, "stadtwerke", "", edi)
	c := waitPosted(t, got)
	p, err := extractForNode(c, sw.Encrypt.KeyFile, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kwAES128 := "http://www.w3.org/2001/04/xmlenc#kw-aes128"
	if p.KeyAlg != kwAES128 || p.KDFDigest != "http://www.w3.org/2001/04/xmlenc#sha256" ||
		p.AlgorithmID != "00"+hex.EncodeToString([]byte(kwAES128)) || p.hasPartyU || p.hasPartyV || p.SuppPubInfo != "" || p.SuppPrivInfo != "" {
		t.Errorf("key wrap %s, ConcatKDF digest %s, AlgorithmID %s, PartyUInfo %v %q, PartyVInfo %v %q: not what WSS4J writes",
			p.KeyAlg, p.KDFDigest, p.AlgorithmID, p.hasPartyU, p.PartyUInfo, p.hasPartyV, p.PartyVInfo)
	}
	if p.DataAlg != "http://www.w3.org/2009/xmlenc11#aes128-gcm" {
		t.Errorf("content encryption %s", p.DataAlg)
	}
	checkNodeDecrypts(t, node, p, edi)
}
