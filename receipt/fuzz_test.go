package receipt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/interop"
)

func FuzzParseReceipt(f *testing.F) {
	um := &as4.UserMessage{MessageInfo: as4.MessageInfo{MessageID: "orig@x"}}
	s, err := BuildReceipt(um, []Reference{
		{URI: "#m", DigestMethod: algSHA256, DigestValue: "AAAA", Transforms: []Transform{{Algorithm: algExcC14N, PrefixList: "S12"}}},
		{URI: "cid:a", DigestMethod: algSHA256, DigestValue: "BBBB", Transforms: []Transform{{Algorithm: algSwA}}},
	}, fixedOpts)
	if err != nil {
		f.Fatal(err)
	}
	b, _ := s.Doc.WriteToBytes()
	f.Add(b)
	e, err := BuildError([]*as4.Error{as4.DeliveryFailure("handler failed", nil)}, "orig@x", fixedOpts)
	if err != nil {
		f.Fatal(err)
	}
	b, _ = e.Doc.WriteToBytes()
	f.Add(b)
	if _, err := os.Stat(filepath.Join("..", "..", "shared", "interop", "README.md")); err == nil || os.Getenv("GATEWAY_INTEROP_DIR") != "" {
		dir := interop.Dir(f)
		for _, name := range []string{"TestReceipt12.xml", "helger.as4in"} {
			raw, err := os.ReadFile(filepath.Join(dir, "as4", name))
			if err != nil {
				continue
			}
			if i := bytes.Index(raw, []byte("\n\n<?xml")); i > 0 {
				raw = raw[i+2:]
			}
			f.Add(raw)
		}
	}
	refs := []Reference{{URI: "#m", DigestMethod: algSHA256, DigestValue: "AAAA"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := as4.ParseXML(data, 48)
		if err != nil {
			return
		}
		r, err := ParseReceipt(doc)
		if err != nil {
			var se *SignalError
			if as4.CodeOf(err) == "" && !errors.Is(err, ErrNotReceipt) && !errors.As(err, &se) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if r.RefToMessageID == "" || (len(r.References) == 0 && r.UserMessage == nil) {
			t.Fatalf("accepted incomplete receipt %+v", r)
		}
		for _, ref := range r.References {
			if ref.DigestMethod == "" || ref.DigestValue == "" {
				t.Fatalf("reference without digest %+v", ref)
			}
		}
		if err := r.Covers(refs); err != nil && as4.CodeOf(err) != as4.CodeInvalidReceipt {
			t.Fatalf("Covers: %v", err)
		}
	})
}
