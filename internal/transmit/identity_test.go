package transmit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/outbound"
)

// TestAS2IdentityPerPartner: the identity provider is asked for the
// partner of each attempt; its AS2 id is the AS2-From and its key signs
// (the signature verifies with its certificate, not with the other
// identity's); a provider error sends nothing and is retried.
func TestAS2IdentityPerPartner(t *testing.T) {
	one, two := ours(t), theirs(t)
	ids := map[string]transmit.Identity{
		"p1": {AS2ID: "ONE", Cert: one.Cert, Key: one.Key},
		"p2": {AS2ID: "TWO", Cert: two.Cert, Key: two.Key},
	}
	type request struct {
		from string
		body []byte
	}
	var mu sync.Mutex
	var got []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		raw := append([]byte("Content-Type: "+r.Header.Get("Content-Type")+"\r\n\r\n"), b...)
		mu.Lock()
		got = append(got, request{r.Header.Get("AS2-From"), raw})
		mu.Unlock()
	}))
	defer srv.Close()
	var asked []string
	tr := transmit.NewAS2(func(partner string) (transmit.Identity, error) {
		asked = append(asked, partner)
		id, ok := ids[partner]
		if !ok {
			return transmit.Identity{}, errors.New("no identity of ours for this partner")
		}
		return id, nil
	}, func(partner string) (*transmit.AS2Settings, error) {
		return &transmit.AS2Settings{URL: srv.URL, To: "THEM", Cipher: "none", MDN: "none"}, nil
	}, t.TempDir())

	for _, p := range []string{"p1", "p2"} {
		mid, err := transmit.NewMessageID(outbound.AS2, ids[p])
		if err != nil {
			t.Fatal(err)
		}
		m := &outbound.Message{ID: p, Partner: p, Protocol: outbound.AS2, MessageID: mid}
		if a := attempt(t, tr, m, []byte(edi)); a.Outcome != outbound.Deliver {
			t.Fatalf("%s: attempt %+v", p, a)
		}
	}
	m := &outbound.Message{ID: "p3", Partner: "p3", Protocol: outbound.AS2, MessageID: "<p3@x>"}
	if a := attempt(t, tr, m, []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "no identity of ours") || m.Attempts != 0 {
		t.Fatalf("p3: attempt %+v", a)
	}
	if len(asked) != 3 || asked[0] != "p1" || asked[1] != "p2" || asked[2] != "p3" {
		t.Errorf("the provider was asked for %q", asked)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	for i, c := range []struct {
		from          string
		signer, other transmit.Identity
	}{{"ONE", ids["p1"], ids["p2"]}, {"TWO", ids["p2"], ids["p1"]}} {
		if got[i].from != c.from {
			t.Errorf("request %d: AS2-From %q, want %q", i, got[i].from, c.from)
		}
		if res, err := smime.Unwrap(got[i].body, smime.Options{Trusted: certs(c.signer.Cert)}); err != nil || !res.Signed {
			t.Errorf("request %d: the signature does not verify with %s's certificate: %v", i, c.from, err)
		}
		if _, err := smime.Unwrap(got[i].body, smime.Options{Trusted: certs(c.other.Cert)}); err == nil {
			t.Errorf("request %d: the signature verifies with the other identity's certificate", i)
		}
	}
}
