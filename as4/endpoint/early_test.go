package endpoint_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/as4/endpoint"
)

// TestEarlyInflation: the one compressed attachment of an encrypted message
// is inflated while it is decrypted, and the handler gets the same payload,
// size and SHA-256 as when it is inflated afterwards (unencrypted, or two
// payloads); a gzip bomb inflated early still gets EBMS:0303 (see
// TestGzipBombRefused), counted here too.
//
// Not parallel: the counter is the package's, and parallel tests run only
// after the sequential ones.
func TestEarlyInflation(t *testing.T) {
	k := getKeys(t)
	h := newHarness(t, harnessOptions{})
	var data []byte
	for i := 0; len(data) < 3<<20; i++ {
		data = fmt.Appendf(data, "LIN+%d++%x:EN'\r\n", i, sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)}))
	}
	signOnly := rsaClient(k)
	signOnly.Encryption = nil
	for _, tc := range []struct {
		name     string
		c        *client.Client
		payloads int
		early    bool
		arriving bool // the payload was decrypted (or verified) while it arrived
	}{
		{"encrypted, one payload", rsaClient(k), 1, true, true},
		{"encrypted, two payloads", rsaClient(k), 2, false, false},
		{"signed only", signOnly, 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testMessage(fmt.Sprintf("early-%d-%v@acme.test", tc.payloads, tc.early))
			m.Payloads = nil
			for range tc.payloads {
				m.Payloads = append(m.Payloads, client.Payload{MimeType: "application/edifact", Data: data, Compress: true})
			}
			before, arrivingBefore := endpoint.EarlyInflations.Load(), endpoint.ArrivingAttachments.Load()
			if _, _, err := tc.c.Send(context.Background(), h.url, m); err != nil {
				t.Fatal(err)
			}
			if got := endpoint.EarlyInflations.Load() - before; (got > 0) != tc.early {
				t.Fatalf("%d payloads inflated early, want early=%v", got, tc.early)
			}
			if got := endpoint.ArrivingAttachments.Load() - arrivingBefore; (got > 0) != tc.arriving {
				t.Fatalf("%d messages read while their attachment arrived, want arriving=%v", got, tc.arriving)
			}
			d := h.handler.delivered()
			last := d[len(d)-1]
			want := sha256.Sum256(data)
			for i, p := range last.msg.Payloads {
				if !bytes.Equal(last.payloads[i], data) || p.Size != int64(len(data)) || p.SHA256 != hex.EncodeToString(want[:]) {
					t.Fatalf("payload %d: %d bytes, size %d, sha %s", i, len(last.payloads[i]), p.Size, p.SHA256)
				}
			}
		})
	}
}
