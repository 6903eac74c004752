package as2

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/mdn"
)

// TestEveryFailureKindHasAnMDN: every exchange.FailureKind gets a negative
// MDN naming the reason and the incident (a kind added to exchange without
// an MDN fails here).
func TestEveryFailureKindHasAnMDN(t *testing.T) {
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
		pm, err := mdn.ParseHTTP(rep.Header, rep.Body)
		if err != nil {
			t.Fatal(err)
		}
		txt := pm.Report.HumanText
		if pm.Report.Disposition.String() != mdn.DispUnexpectedProcessingError.String() || !strings.Contains(txt, "GW-7K3QX9") ||
			strings.Contains(txt, "internal detail") || (k != exchange.HandlerFailed && !strings.Contains(txt, "reason of "+k.String())) {
			t.Errorf("%s: %s %q", k, pm.Report.Disposition, txt)
		}
	}
}
