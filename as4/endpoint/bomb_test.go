package endpoint_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/testbomb"
)

// TestGzipBombRefused: a signed message whose attachment is a 1 GiB gzip
// bomb gets EBMS:0303 DecompressionFailure as a permanent error, and the
// handler never runs.
func TestGzipBombRefused(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	m := testMessage("bomb@acme.test")
	m.Payloads = []client.Payload{{MimeType: "application/edifact", Data: testbomb.Gzip(1 << 30), Compressed: true}}
	_, resp, err := rsaClient(k).Send(context.Background(), h.url, m)
	if err == nil {
		t.Fatal("gzip bomb accepted")
	}
	if resp.Status != http.StatusOK {
		t.Errorf("HTTP %d, want 200 for a permanent error", resp.Status)
	}
	if code, ae := signalCode(t, k, resp); code != as4.CodeDecompressionFailure {
		t.Fatalf("code %s (%v), want EBMS:0303", code, ae)
	}
	if n := h.handler.count(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}
