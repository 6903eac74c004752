package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// TestDeliveriesSplitAtReply: a message refused twice before the pipeline
// under one transport key (two reply/rejected records, no "received") is
// two rejected deliveries; a duplicate answered after an accepted
// delivery without a "received" record of its own is a delivery of its
// own too.
func TestDeliveriesSplitAtReply(t *testing.T) {
	now := time.Now()
	k := string(dedup.TransportKey("as2", "as2", "DEMO", "m1@demo"))
	rec := func(i int, step audit.Step, decision string) audit.Record {
		return audit.Record{Time: now.Add(time.Duration(i) * time.Second), Step: step, Partner: "demo", Protocol: "as2", MessageID: "m1@demo", Key: k, Decision: decision}
	}
	ds := deliveries([]audit.Record{rec(0, audit.StepReply, "rejected"), rec(1, audit.StepReply, "rejected")})
	if len(ds) != 2 || ds[0].Outcome != "rejected" || ds[1].Outcome != "rejected" {
		t.Fatalf("two refusals: %d deliveries %+v", len(ds), ds)
	}
	ds = deliveries([]audit.Record{rec(0, audit.StepReceived, ""), rec(1, audit.StepDecision, "new"), rec(2, audit.StepHandler, "ok"),
		rec(3, audit.StepReply, "accepted"), rec(4, audit.StepDelivery, "refused"), rec(5, audit.StepDecision, "duplicate"), rec(6, audit.StepReply, "")})
	if len(ds) != 2 || ds[0].Outcome != "processed" || len(ds[0].Records) != 5 || ds[1].Outcome != "duplicate" {
		t.Fatalf("accepted then duplicate: %d deliveries", len(ds))
	}
}

// TestDeliveriesSkipSending: the audit records of messages we send
// (submit, send) are not deliveries to us: they neither make one nor join
// an inbound delivery of the same partner and Message-ID.
func TestDeliveriesSkipSending(t *testing.T) {
	now := time.Now()
	rec := func(i int, step audit.Step, decision string) audit.Record {
		return audit.Record{Time: now.Add(time.Duration(i) * time.Second), Step: step, Partner: "demo", Protocol: "as2", MessageID: "<o1@gw>", Decision: decision}
	}
	ds := deliveries([]audit.Record{rec(0, audit.StepSubmit, "queued"), rec(1, audit.StepSend, "retry"), rec(2, audit.StepSend, "delivered"),
		rec(3, audit.StepReceived, ""), rec(4, audit.StepSend, "refused"), rec(5, audit.StepReply, "accepted")})
	if len(ds) != 1 || len(ds[0].Records) != 2 || ds[0].Outcome != "processed" {
		t.Fatalf("%d deliveries %+v, want the inbound one with its 2 records", len(ds), ds)
	}
}

// FuzzClaimedSender: whatever an unknown sender claims to be (partner
// bytes, quoted by the endpoints' refusal sentences), the console reads
// back exactly that claim from the audit record, and never panics on any
// refusal text.
func FuzzClaimedSender(f *testing.F) {
	for _, s := range []string{"STRANGER", "urn:oasis:names:tc:ebcore:partyid-type:iso6523:0088", `a"b\c`, "ünï\x00code", ""} {
		f.Add(s, "m1@x")
	}
	f.Fuzz(func(t *testing.T, claimed, msgID string) {
		as2 := audit.Record{Protocol: "as2", MessageID: dedup.NormalizeMessageID(msgID), Decision: "rejected",
			Key:   string(dedup.TransportKey("as2", "as2", claimed, msgID)),
			Error: fmt.Sprintf("no trading partner agreement for AS2-From %q and AS2-To %q", claimed, "GATEWAY")}
		as4 := audit.Record{Protocol: "as4", MessageID: msgID, Decision: "rejected",
			Error: fmt.Sprintf("no trading partner agreement for eb:From PartyId %q (type %q) (incident GW-AAAAAA, quote it)", claimed, "t")}
		for _, r := range []audit.Record{as2, as4} {
			if got := claimedSender(r); got != claimed {
				t.Errorf("%s: claimed %q read back as %q", r.Protocol, claimed, got)
			}
		}
		// Another AS2-From than the key's is not believed.
		as2.Key = string(dedup.TransportKey("as2", "as2", claimed+"x", msgID))
		if got := claimedSender(as2); got != "" {
			t.Errorf("AS2 claim %q not matching the key read as %q", claimed, got)
		}
		claimedSender(audit.Record{Protocol: "as4", Decision: "rejected", Error: claimed + msgID})
	})
}
