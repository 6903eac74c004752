package cms

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"testing"
	"testing/iotest"
)

// FuzzVerifyDetachedStream feeds arbitrary signatures and contents (the
// signature part of a streamed multipart/signed and the part it signs) to
// VerifyDetachedStream, VerifyDetachedStreamCheck and
// VerifyDetachedDigestsCheck: no panic, the whole content is read when the
// signature parses, and each agrees with its in-memory counterpart on
// success, signer and digest (a signature that carries its content aside,
// which VerifyDetachedDigestsCheck leaves to the others).
func FuzzVerifyDetachedStream(f *testing.F) {
	cert, key := newCert(f, "fuzz", 0, certOpts{})
	content := []byte("Content-Type: application/edifact\r\n\r\nUNB+UNOA:2+ACME+GATEWAY'")
	for _, o := range []SignOptions{{}, {Digest: "sha1"}, {Digest: "sha512", PSS: true}, {Attached: true}} {
		der, err := Sign(content, cert, key, o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(der, content)
		f.Add(der, content[1:])
	}
	f.Add([]byte{0x30, 0x80, 0x00, 0x00}, []byte("x"))
	trusted := []*x509.Certificate{cert}
	var checked []*x509.Certificate
	check := func(signer *x509.Certificate, _ []*x509.Certificate) error {
		checked = append(checked, signer)
		return nil
	}
	f.Fuzz(func(t *testing.T, sig, content []byte) {
		want, werr := VerifyDetached(sig, content, trusted, testNow)
		got, n, err := VerifyDetachedStream(sig, iotest.OneByteReader(bytes.NewReader(content)), trusted, testNow)
		same(t, "trusted", want, werr, got, err)
		if err == nil && n != int64(len(content)) {
			t.Fatalf("%d of %d content bytes read", n, len(content))
		}

		checked = nil
		want, werr = VerifyDetachedCheck(sig, content, nil, testNow, check)
		inMemory := len(checked)
		got, _, err = VerifyDetachedStreamCheck(sig, bytes.NewReader(content), nil, testNow, check)
		same(t, "CA check", want, werr, got, err)
		if len(checked) != 2*inMemory {
			t.Fatalf("check ran %d times in memory, %d streamed", inMemory, len(checked)-inMemory)
		}

		digests := map[crypto.Hash][]byte{}
		for _, h := range []crypto.Hash{crypto.MD5, crypto.SHA1, crypto.SHA224, crypto.SHA256, crypto.SHA384, crypto.SHA512} {
			d := h.New()
			d.Write(content)
			digests[h] = d.Sum(nil)
		}
		got, err = VerifyDetachedDigestsCheck(sig, digests, trusted, testNow, nil)
		if !errors.Is(err, ErrDigestsMissing) {
			want, werr = VerifyDetached(sig, content, trusted, testNow)
			same(t, "digests", want, werr, got, err)
		}
	})
}

// same fails t where a streamed verification and the one in memory differ.
func same(t *testing.T, what string, want *Signer, werr error, got *Signer, err error) {
	t.Helper()
	if (werr == nil) != (err == nil) {
		t.Fatalf("%s: in memory %v, streamed %v", what, werr, err)
	}
	if werr != nil {
		// Both refuse; the class of the refusal may differ, as the checks
		// run in another order: in memory the content of an attached
		// signature is compared before the SignerInfos are parsed, the
		// stream parses them first
		// (testdata/fuzz/FuzzVerifyDetachedStream/74a6e6d3d7d0f759).
		return
	}
	if !want.Cert.Equal(got.Cert) || want.DigestAlg != got.DigestAlg || !bytes.Equal(want.Digest, got.Digest) {
		t.Fatalf("%s: signer %+v in memory, %+v streamed", what, want, got)
	}
}
