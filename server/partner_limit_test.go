package server

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
)

// TestPartnerBodyLimit: the demo partner's max_body_bytes (1 MiB, under a
// global limit of 4 GiB) applies to its messages through the real server.
// AS2 (AS2-From names it): a larger Content-Length is answered 413 before
// a byte of the body is sent, a larger chunked body 413 as soon as it
// passes the limit. AS4 (eb:From names it, in the envelope part): a signed
// and encrypted message whose attachment passes the limit is answered 413
// while it is read, one within it gets its receipt.
func TestPartnerBodyLimit(t *testing.T) {
	pdir := demoPartners(t, func(y string) string { return y + "max_body_bytes: 1048576\n" })
	handled := 0
	url := memoryServerWith(t, func(c *config.Config) { c.Partners = pdir }, func(m *exchange.Message) error {
		handled++
		return nil
	})
	addr := strings.TrimPrefix(url, "http://")

	if st, _ := rawExchange(t, addr, as2Head("over-partner", 2<<20), nil, 0, 2*time.Second); st != http.StatusRequestEntityTooLarge {
		t.Errorf("AS2 Content-Length over the partner's limit: HTTP %d, want 413 before the body", st)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/as2", io.MultiReader(bytes.NewReader(make([]byte, 2<<20))))
	for k, v := range map[string]string{"AS2-From": "DEMO", "AS2-To": "GATEWAY", "AS2-Version": "1.2", "Message-Id": "<chunked-over@demo>",
		"Content-Type": "application/pkcs7-mime; smime-type=enveloped-data"} {
		req.Header.Set(k, v)
	}
	req.ContentLength = -1
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("AS2 chunked body over the partner's limit: %v %v, want 413", resp, err)
	} else {
		resp.Body.Close()
	}

	big := newAS4Streamed(t, 4<<20, 21, "over-limit@demo") // about 2 MiB gzipped
	if err := big.post(url, big.body, -1); err == nil || !strings.Contains(err.Error(), "HTTP 413") {
		t.Errorf("AS4 attachment over the partner's limit: %v, want HTTP 413", err)
	}
	small := newAS4Streamed(t, 256<<10, 22, "within-limit@demo")
	if err := small.post(url, small.body, -1); err != nil {
		t.Errorf("AS4 message within the partner's limit: %v", err)
	}
	if handled != 1 {
		t.Errorf("handler ran %d times, want 1", handled)
	}
}
