package exchange

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/edigateway/gateway/audit"
)

var incidentRE = regexp.MustCompile(`^GW-[0-9A-HJKMNP-TV-Z]{6}$`)

func TestNewIncident(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		inc := NewIncident()
		if !incidentRE.MatchString(inc) {
			t.Fatalf("incident %q", inc)
		}
		seen[inc] = true
	}
	if len(seen) < 999 {
		t.Errorf("%d distinct incidents of 1000", len(seen))
	}
}

// failureReplies records the failures it is asked to answer.
type failureReplies struct {
	testReplies
	got *[]*Failure
	err error
}

func (r failureReplies) Failed(ctx context.Context, f *Failure) (Reply, error) {
	*r.got = append(*r.got, f)
	if r.err != nil {
		return Reply{}, r.err
	}
	return r.testReplies.Failed(ctx, f)
}

// TestRefusalsCarryAnIncident: every refusal the pipeline decides hands the
// protocol an incident that its log line and audit records carry, and a
// partner-safe reason without the parser's error text; a reply that cannot
// be built is a 500 whose body quotes an incident.
func TestRefusalsCarryAnIncident(t *testing.T) {
	var logs bytes.Buffer
	h := &countingHandler{fn: func(m *Message) error {
		if m.MessageID == "fails" {
			return errors.New("ERP at 10.1.2.3 unreachable")
		}
		return nil
	}}
	f := newLedgerFixture(t)
	f.p.Handler = h
	f.p.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	var got []*Failure
	send := func(id string, replyErr error, policy DriftPolicy, payloads ...string) Reply {
		in := f.proto.inbound("acme", id, payloads[0])
		for _, extra := range payloads[1:] {
			in.Message.Payloads = append(in.Message.Payloads, NewPayload(Payload{SHA256: sha(extra), Size: int64(len(extra))}, MemoryBody(extra)))
		}
		in.Replies = failureReplies{in.Replies.(testReplies), &got, replyErr}
		in.OnDrift = policy
		return f.p.Process(context.Background(), in)
	}
	ubl := `<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2">` + "\n" + `<a></b></Invoice>`
	send("fails", nil, DriftReject, "payload")
	send("ok", nil, DriftReject, invoic("REF1", "A"))
	send("ok", nil, DriftReject, "changed")                // transport drift
	send("ok2", nil, DriftQuarantine, invoic("REF1", "B")) // interchange drift, quarantined
	send("bad", nil, DriftReject, ubl)                     // damaged
	send("twice", nil, DriftReject, invoic("REF2", "A"), invoic("REF2", "B"))
	r := send("unbuildable", errors.New("template broken"), DriftReject, strings.Replace(invoic("REF3", "A"), "UNZ+1+REF3", "UNZ+1+REF4", 1))
	wantKinds := []FailureKind{HandlerFailed, Drift, Quarantined, Damaged, Damaged, Damaged}
	if len(got) != len(wantKinds) {
		t.Fatalf("%d failures, want %d", len(got), len(wantKinds))
	}
	incidents := map[string]bool{}
	for _, r := range f.a.Records() {
		if r.Incident != "" {
			incidents[r.Incident] = true
		}
	}
	for i, fl := range got {
		if fl.Kind != wantKinds[i] || !incidentRE.MatchString(fl.Incident) || !incidents[fl.Incident] ||
			!strings.Contains(logs.String(), `"incident":"`+fl.Incident+`"`) {
			t.Errorf("failure %d: %s incident %q (audited %v)", i, fl.Kind, fl.Incident, incidents[fl.Incident])
		}
		if fl.Kind != HandlerFailed && fl.Reason == "" || strings.Contains(fl.Reason, "XML syntax error") || strings.Contains(fl.Reason, "10.1.2.3") {
			t.Errorf("failure %d: reason %q", i, fl.Reason)
		}
	}
	if got[2].Reason == "" || !strings.Contains(got[2].Reason, "EDIFACT interchange reference REF1") || !strings.Contains(got[2].Reason, "quarantined") {
		t.Errorf("quarantine reason %q", got[2].Reason)
	}
	if got[3].Reason != "payload 1: UBL: malformed XML (line 2)" {
		t.Errorf("damaged reason %q", got[3].Reason)
	}
	inc := strings.TrimSuffix(strings.TrimPrefix(string(r.Body)[strings.Index(string(r.Body), "(incident ")+1:], "incident "), ")\n")
	if r.Status != 500 || !incidentRE.MatchString(inc) || r.Incident != inc || !incidents[inc] {
		t.Errorf("unbuildable reply: HTTP %d %q incident %q", r.Status, r.Body, r.Incident)
	}
	for _, rec := range f.a.Records() {
		if rec.Step == audit.StepReply && rec.Decision == "" && rec.Incident == "" && rec.Disposition != "processed" {
			t.Errorf("negative reply audited without incident: %+v", rec)
		}
	}
}
