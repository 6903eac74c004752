package smime

import (
	"testing"

	"github.com/edigateway/gateway/internal/cms"
)

// RFC 5402 §4: the MIC of an unsigned message is taken over the uncompressed
// data including all its MIME header fields, so a compressed, unsigned,
// unencrypted message is digested with the headers of the entity inside
// the CompressedData. ContentOnlyCompressedMIC keeps the old reading
// (content only) for senders that digest that. Known answers computed with
// `openssl dgst -sha256 -binary | base64`.
func TestCompressedUnsignedMICKnownAnswer(t *testing.T) {
	entity := []byte("Content-Type: application/edi-x12\r\nContent-Disposition: attachment; filename=po.x12\r\n\r\nISA*00*          *00*~\n")
	const (
		withHeaders = "zEn+pdHm53LTHkE5Gc8bN1VXcBlAS206/gHeGQmUwaE="
		contentOnly = "wo3xxEN0inySTTv8EPTcxt/TqvI6lvLbs0VOZr5qdM4="
	)
	z, err := cms.Compress(entity)
	if err != nil {
		t.Fatal(err)
	}
	raw := wrapCMS(t, "compressed-data", z)
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"rfc5402 (default)", Options{}, withHeaders},
		{"content only", Options{ContentOnlyCompressedMIC: true}, contentOnly},
	} {
		res, err := Unwrap(raw, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Payload) != "ISA*00*          *00*~\n" || !res.Compressed || res.Signed || res.Encrypted {
			t.Fatalf("%s: %+v", tc.name, res)
		}
		if got, _ := res.MIC("sha256"); got != tc.want {
			t.Errorf("%s: MIC %s, want %s", tc.name, got, tc.want)
		}
	}
	// The sender side agrees: Build's MIC for a compressed, unsigned,
	// unencrypted message is the RFC 5402 one.
	b, err := Build([]byte("ISA*00*          *00*~\n"), "application/edi-x12", "po.x12", BuildOptions{Compression: CompressThenSign})
	if err != nil {
		t.Fatal(err)
	}
	res, err := UnwrapEntity(httpEntity(b), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := res.MIC("sha256"); got != b.MIC {
		t.Errorf("Build MIC %s, Unwrap MIC %s", b.MIC, got)
	}
	// A plain (uncompressed, unsigned, unencrypted) message keeps the
	// content-only MIC of RFC 4130 §7.3.1.
	plain, err := Unwrap(entity, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := plain.MIC("sha256"); got != contentOnly {
		t.Errorf("plain message MIC %s, want %s", got, contentOnly)
	}
}
