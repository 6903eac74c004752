package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
)

func msg(payloads ...exchange.Payload) *exchange.Message {
	return &exchange.Message{Partner: "acme", Protocol: exchange.AS2, MessageID: "m1",
		TransportKey: dedup.TransportKey("as2", "as2", "ACME", "m1"), Payloads: payloads}
}

func payload(name, body string) exchange.Payload {
	sum := sha256.Sum256([]byte(body))
	return exchange.NewPayload(exchange.Payload{Filename: name, ContentType: "application/edifact", SHA256: hex.EncodeToString(sum[:])},
		exchange.MemoryBody(body))
}

func TestWritesEachPayloadUnderPartner(t *testing.T) {
	root := t.TempDir()
	m := msg(payload("../../etc/passwd", "UNB+1'"), payload("", "second"))
	if err := (Dir{Root: root}).Handle(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	entries, _ := Payloads(filepath.Join(root, "acme"))
	if len(entries) != 2 {
		t.Fatalf("files = %v", entries)
	}
	first := filepath.Join(root, "acme", FileName(m, 0))
	if !strings.HasSuffix(first, "-"+m.Payloads[0].SHA256[:12]+"-passwd") {
		t.Errorf("name %q not sanitised", first)
	}
	if b, _ := os.ReadFile(first); string(b) != "UNB+1'" {
		t.Errorf("content %q", b)
	}
	if !strings.HasSuffix(FileName(m, 1), "-payload.edi") || FileName(m, 1) == FileName(m, 0) {
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
	// The same name holding other content (written by someone else) is
	// never overwritten.
	target := filepath.Join(root, "acme", FileName(m, 0))
	if err := os.WriteFile(target, []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := h.Handle(context.Background(), m)
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "tampered" {
		t.Fatalf("overwritten: %q", b)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "acme"))
	if len(entries) != 2 { // the payload and its sidecar
		t.Fatalf("temp files left: %v", entries)
	}
}

func TestNameDoesNotDependOnPosition(t *testing.T) {
	a, b := payload("a.edi", "one"), payload("b.edi", "two")
	both, onlyB := msg(a, b), msg(b)
	if FileName(both, 1) != FileName(onlyB, 0) {
		t.Fatalf("%s != %s: a run without the duplicate payload would write a second copy", FileName(both, 1), FileName(onlyB, 0))
	}
}

// TestSidecarAndPayloadSyncOverlap: the sidecar and the payload are synced
// at the same time (two syncs in flight), not one after the other.
func TestSidecarAndPayloadSyncOverlap(t *testing.T) {
	var mu sync.Mutex
	inFlight, most := 0, 0
	both := make(chan struct{})
	syncFile = func(f *os.File) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == 2 {
			close(both)
		}
		mu.Unlock()
		select { // wait a while for the other sync to start
		case <-both:
		case <-time.After(2 * time.Second):
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return f.Sync()
	}
	defer func() { syncFile = (*os.File).Sync }()
	if err := (Dir{Root: t.TempDir()}).Handle(context.Background(), msg(payload("a.edi", "UNB+1'"))); err != nil {
		t.Fatal(err)
	}
	if most != 2 {
		t.Fatalf("at most %d sync in flight: the sidecar and the payload were synced one after the other", most)
	}
}

// TestFailedSidecarLeavesNoPayload: when the sidecar cannot be made
// durable, the payload (written at the same time) never gets its name.
func TestFailedSidecarLeavesNoPayload(t *testing.T) {
	boom := errors.New("sync failed")
	syncFile = func(f *os.File) error {
		if st, err := f.Stat(); err == nil && st.Size() > 100 { // the sidecar, not the 6-byte payload
			return boom
		}
		return f.Sync()
	}
	defer func() { syncFile = (*os.File).Sync }()
	root := t.TempDir()
	err := (Dir{Root: root}).Handle(context.Background(), msg(payload("a.edi", "UNB+1'")))
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "sidecar") {
		t.Fatalf("err = %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "acme"))
	if len(entries) != 0 {
		t.Fatalf("files after a failed sidecar: %v", entries)
	}
}
