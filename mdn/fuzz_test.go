package mdn

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// interopSeed reads an interop vector for the fuzz corpus when it is
// present; fuzz seeds never skip or fail (TestInterop* do that).
func interopSeed(name string) []byte {
	dir := os.Getenv("GATEWAY_INTEROP_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "interop")
	}
	b, err := os.ReadFile(filepath.Join(dir, "as2", name))
	if err != nil {
		return nil
	}
	return b
}

// FuzzParse feeds Parse arbitrary content types and bodies. Properties:
// no panic, and for a signed result the signed content and the fields it
// reports are consistent with the input.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"mecas2_signed.mdn", "mecas2_unsigned.mdn"} {
		if raw := interopSeed(name); raw != nil {
			h, off := parseHeaderBlock(raw)
			f.Add(h.Get("Content-Type"), raw[off:])
		}
	}
	r := sampleReport()
	ct, body := Build(r)
	f.Add(ct, body)
	sct, sbody, err := Sign(BuildEntity(r), "sha-256", func([]byte) ([]byte, error) {
		return []byte{0x30, 0x03, 0x02, 0x01, 0x0a}, nil
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sct, sbody)
	f.Add(sct, bytes.ReplaceAll(sbody, []byte("\r\n"), []byte("\n")))
	f.Add("multipart/report; boundary=XYZ", []byte(strings.Replace(handMDN, "%s", encodeB64Lines(handFields), 1)))
	f.Add("multipart/report", []byte("--a\n--a\n\n--a--"))
	f.Add("multipart/signed; boundary=s", []byte("--s\r\n--s\r\n\r\n--s--"))

	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		p, err := Parse(contentType, body)
		if err != nil {
			return
		}
		if p.Signed {
			if len(p.Signature) == 0 {
				t.Fatal("signed MDN with empty signature")
			}
			if !bytes.Contains(body, p.SignedContent) {
				t.Fatal("signed content is not a slice of the body")
			}
		}
		if p.Report.Disposition.Type == "" {
			t.Fatal("parsed MDN without disposition type")
		}
		if _, err := ParseDisposition(p.Report.Disposition.String()); err != nil {
			t.Fatalf("parsed disposition does not re-parse: %v", err)
		}
	})
}

// FuzzParseMessage feeds ParseMessage whole MDN files (headers and body).
func FuzzParseMessage(f *testing.F) {
	for _, name := range []string{"mecas2_signed.mdn", "mecas2_unsigned.mdn"} {
		if raw := interopSeed(name); raw != nil {
			f.Add(raw)
		}
	}
	ct, body := Build(sampleReport())
	f.Add(append([]byte("Content-Type: "+ct+"\r\nAS2-From: \"a b\"\r\n\r\n"), body...))
	f.Add([]byte("Content-Type: multipart/report;\n\tboundary=x\n\n--x\n\n--x--"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = ParseMessage(raw)
	})
}
