package inbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gateway/dedup"
	"gateway/exchange"
)

func msg(payloads ...exchange.Payload) *exchange.Message {
	return &exchange.Message{Partner: "acme", Protocol: exchange.AS2, MessageID: "m1",
		TransportKey: dedup.TransportKey("as2", "as2", "ACME", "m1"), Payloads: payloads}
}

func payload(name, body string) exchange.Payload {
	return exchange.NewPayload(exchange.Payload{Filename: name, ContentType: "application/edifact"}, exchange.MemoryBody(body))
}

func TestWritesEachPayloadUnderPartner(t *testing.T) {
	root := t.TempDir()
	m := msg(payload("../../etc/passwd", "UNB+1'"), payload("", "second"))
	if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "acme"))
	if len(entries) != 2 {
		t.Fatalf("files = %v", entries)
	}
	first := filepath.Join(root, "acme", FileName(m, 0))
	if !strings.HasSuffix(first, "-1-passwd") {
		t.Errorf("name %q not sanitised", first)
	}
	if b, _ := os.ReadFile(first); string(b) != "UNB+1'" {
		t.Errorf("content %q", b)
	}
	if !strings.HasSuffix(FileName(m, 1), "-2-payload.edi") {
		t.Errorf("second name %q", FileName(m, 1))
	}
}

func TestRepeatedRunIsIdempotentAndNeverOverwrites(t *testing.T) {
	root := t.TempDir()
	h := Dir{Root: root}
	m := msg(payload("a.edi", "one"))
	if err := h.Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(context.Background(), m); err != nil {
		t.Fatalf("same message again: %v", err)
	}
	changed := msg(payload("a.edi", "two"))
	err := h.Handle(context.Background(), changed)
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("err = %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(root, "acme", FileName(m, 0)))
	if string(b) != "one" {
		t.Fatalf("overwritten: %q", b)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "acme"))
	if len(entries) != 1 {
		t.Fatalf("temp files left: %v", entries)
	}
}
