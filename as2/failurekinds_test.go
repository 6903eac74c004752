package as2

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/mdn"
)

// TestEveryFailureKindHasAReply: every exchange.FailureKind gets its reply
// (a kind added to exchange without one fails here): a handler failure is
// transient, HTTP 503 with Retry-After and the incident, no MDN (senders
// take a negative MDN as final); the permanent kinds get a negative MDN
// naming the reason and the incident. The handler's error is in neither.
func TestEveryFailureKindHasAReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{memory: true})
	p, _ := e.dir.ByAS2("ACME", "GATEWAY", "GATEWAY")
	x := &inbound{req: &Request{From: "ACME", To: "GATEWAY", MessageID: "<m1@acme>"}, partner: p, micAlg: micAlg{digest: "sha256", spelled: "sha256"}}
	r := &replies{e: e.ep, x: x}
	for _, k := range exchange.FailureKinds() {
		rep, err := r.Failed(context.Background(), &exchange.Failure{Kind: k, Err: errors.New("internal detail"),
			Reason: "reason of " + k.String(), Incident: "GW-7K3QX9", StoredSHA256: "aaaa", PayloadSHA256: "bbbb"})
		if err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		if k == exchange.HandlerFailed {
			txt := string(rep.Body)
			if rep.Status != http.StatusServiceUnavailable || rep.Header.Get("Retry-After") != "60" || rep.Disposition != "http-503" ||
				!strings.Contains(txt, exchange.IncidentNote("GW-7K3QX9")) || !strings.Contains(txt, "<m1@acme>") || strings.Contains(txt, "internal detail") {
				t.Errorf("%s: %d %v %s %q", k, rep.Status, rep.Header, rep.Disposition, txt)
			}
			continue
		}
		pm, err := mdn.ParseHTTP(rep.Header, rep.Body)
		if err != nil {
			t.Fatal(err)
		}
		txt := pm.Report.HumanText
		if pm.Report.Disposition.String() != mdn.DispUnexpectedProcessingError.String() || !strings.Contains(txt, "GW-7K3QX9") ||
			strings.Contains(txt, "internal detail") || !strings.Contains(txt, "reason of "+k.String()) {
			t.Errorf("%s: %s %q", k, pm.Report.Disposition, txt)
		}
	}
}
