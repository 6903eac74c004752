package as2

import (
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/mdn"
)

// A compressed, unsigned, unencrypted message gets the RFC 5402 §4 MIC (over
// the decompressed entity with all its MIME headers), the duplicate MDN
// repeats it, and a partner with mic_compressed: content gets the MIC over
// the content only. Known answers: `openssl dgst -sha256 -binary | base64`.
func TestCompressedUnsignedMIC(t *testing.T) {
	t.Parallel()
	entity := []byte("Content-Type: application/edi-x12\r\nContent-Disposition: attachment; filename=po.x12\r\n\r\nISA*00*          *00*~\n")
	z, err := cms.Compress(entity)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		policy, want string
	}{
		{"  require_signature: false\n  require_encryption: false\n", "zEn+pdHm53LTHkE5Gc8bN1VXcBlAS206/gHeGQmUwaE=, sha-256"},
		{"  require_signature: false\n  require_encryption: false\n  mic_compressed: content\n", "wo3xxEN0inySTTv8EPTcxt/TqvI6lvLbs0VOZr5qdM4=, sha-256"},
	} {
		e := newEnv(t, envOptions{partnerYAML: tc.policy})
		cl := e.client()
		cl.SignDigest, cl.Cipher, cl.Compression, cl.MICAlg = "", "", smime.CompressThenSign, "sha-256"
		cl.MDN = as2client.MDNSync
		m := prepare(t, cl, "placeholder")
		m.Header.Set("Content-Type", "application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z")
		m.Header.Set("Content-Transfer-Encoding", "binary")
		resp, body := e.post(t, m.Header, z)
		p := expectMDN(t, resp, body, mdn.DispProcessed)
		if got := p.Fields.Get("Received-Content-MIC"); got != tc.want {
			t.Errorf("%q: MIC %q, want %q", tc.policy, got, tc.want)
		}
		if got := e.handler.payloads(m.ID); len(got) != 1 || string(got[0]) != "ISA*00*          *00*~\n" {
			t.Fatalf("payloads %q", got)
		}
		resp, body = e.post(t, m.Header, z) // retransmission
		p = expectMDN(t, resp, body, mdn.DispDuplicateDocument)
		if got := p.Fields.Get("Received-Content-MIC"); got != tc.want {
			t.Errorf("%q: duplicate MDN MIC %q, want the original %q", tc.policy, got, tc.want)
		}
	}
}
