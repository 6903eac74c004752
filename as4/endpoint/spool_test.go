package endpoint_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/spooltest"
)

// A message whose attachments cannot be spooled (our disk, not the
// message) is answered 503 with Retry-After, so that the sender retries,
// and the handler does not run; with the spool directory back, the same
// message is processed, and nothing is left in it afterwards.
func TestSpoolFailureAnswersRetryLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	h := newHarness(t, harnessOptions{spoolDir: dir})
	c := rsaClient(getKeys(t))
	// Attachments up to limits.SmallInMemory stay in memory: this one is
	// spooled (random bytes: gzip keeps it large).
	m := testMessage("spool-1@acme")
	big := make([]byte, 256<<10)
	rand.Read(big)
	m.Payloads = append(m.Payloads, client.Payload{MimeType: "application/octet-stream", Data: big, Compress: true})
	out, err := c.Build(m)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := http.Post(h.url, out.ContentType, bytes.NewReader(out.Body))
	if err != nil {
		t.Fatal(err)
	}
	raw.Body.Close()
	if raw.StatusCode != http.StatusServiceUnavailable || raw.Header.Get("Retry-After") == "" || h.handler.count() != 0 {
		t.Fatalf("spool missing: HTTP %d Retry-After %q, handler ran %d times", raw.StatusCode, raw.Header.Get("Retry-After"), h.handler.count())
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(context.Background(), h.url, out)
	if err != nil || resp.Status != http.StatusOK || resp.Receipt == nil || h.handler.count() != 1 {
		t.Fatalf("spool back: %v HTTP %d, handler ran %d times", err, resp.Status, h.handler.count())
	}
	if left := spooltest.LeftoversAfter(t, dir, 5*time.Second); len(left) != 0 {
		t.Fatalf("files left in the spool directory: %v", left)
	}
}
