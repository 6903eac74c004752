package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/inbox"
)

// TestSameInterchangeViaAS2AndAS4 sends one EDIFACT interchange through AS2
// and then, under another transport id, through AS4 to one gateway: the
// handler runs once, both partners get positive replies, and the ledger
// shows both transport ids.
func TestSameInterchangeViaAS2AndAS4(t *testing.T) {
	g := newServedDemo(t)
	s, demo := g.s, g.demo

	edi := []byte("UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+XPROTO1'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-77+9'UNT+3+1'UNZ+1+XPROTO1'")
	c := g.as2
	msg, err := c.Prepare(edi, "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Send(context.Background(), msg)
	if err != nil || !res.OK() || res.MDN.Disposition.IsWarning() {
		t.Fatalf("AS2: %v %+v", err, res)
	}

	payload := filepath.Join(t.TempDir(), "invoice.edi")
	os.WriteFile(payload, edi, 0o600)
	var out, errb bytes.Buffer
	code := run([]string{"send-as4", "-url", g.url + "/as4",
		"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
		"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
		"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", "as4-xproto@demo", payload}, &out, &errb)
	if code != 0 {
		t.Fatalf("AS4 send exit %d: %s %s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "signature valid") {
		t.Fatalf("AS4 receipt: %s", out.String())
	}

	files, _ := inbox.Payloads(filepath.Join(s.Config.Handler.Inbox, "demo"))
	if len(files) != 1 {
		t.Fatalf("inbox holds %d files, want 1", len(files))
	}
	recs, err := s.Backend.FindInterchanges(context.Background(), dedup.InterchangeQuery{Reference: "XPROTO1"})
	if err != nil || len(recs) != 1 || recs[0].Retries != 1 || len(recs[0].MessageIDs) != 2 || recs[0].MessageIDs[1] != "as4-xproto@demo" {
		t.Fatalf("ledger: %v %+v", err, recs)
	}
	ev, err := s.Backend.AuditSink().(audit.Reader).Query(context.Background(), audit.Query{MessageID: "as4-xproto@demo"})
	if err != nil {
		t.Fatal(err)
	}
	var dup bool
	for _, r := range ev {
		dup = dup || (r.Decision == "duplicate-interchange" && r.Protocol == "as4")
	}
	if !dup {
		t.Fatalf("no duplicate-interchange audit record for the AS4 delivery: %+v", ev)
	}
}

// TestInterchangeWindowRecordedAtAccept sends one EDIFACT interchange over
// AS4 (the demo partner's AS4 window is the default 30 days), moves the
// database clock's view of it 8 days back, and resends it over AS2 (window 7
// days) under a new Message-ID: the window recorded when it was accepted
// decides, so the AS2 resend is a duplicate and the handler does not run again.
func TestInterchangeWindowRecordedAtAccept(t *testing.T) {
	g := newServedDemo(t)
	s, demo, runs := g.s, g.demo, g.runs

	edi := []byte("UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+XWIN8'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-78+9'UNT+3+1'UNZ+1+XWIN8'")
	payload := filepath.Join(t.TempDir(), "invoice.edi")
	os.WriteFile(payload, edi, 0o600)
	var out, errb bytes.Buffer
	code := run([]string{"send-as4", "-url", g.url + "/as4",
		"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
		"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
		"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
		"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", "as4-win8@demo", payload}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "signature valid") {
		t.Fatalf("AS4 send exit %d: %s %s", code, out.String(), errb.String())
	}
	recs, err := s.Backend.FindInterchanges(context.Background(), dedup.InterchangeQuery{Reference: "XWIN8"})
	if err != nil || len(recs) != 1 || recs[0].Window != 30*24*time.Hour {
		t.Fatalf("ledger after the AS4 delivery: %v %+v", err, recs)
	}
	// Day 8: the interchange was first (and last) seen 8 days ago by the
	// database clock the ledger decides with.
	db := s.Backend.(interface{ DB() *sql.DB }).DB()
	const day = 24 * 60 * 60 * 1000
	if _, err := db.Exec(`UPDATE ledger_interchanges SET first_seen = first_seen - 8 * ?1, last_seen = last_seen - 8 * ?1,
		lease_until = lease_until - 8 * ?1 WHERE reference = 'XWIN8'`, day); err != nil {
		t.Fatal(err)
	}

	c := g.as2
	msg, err := c.Prepare(edi, "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Send(context.Background(), msg)
	if err != nil || !res.OK() {
		t.Fatalf("AS2 resend: %v %+v", err, res)
	}
	if !res.MDN.Disposition.IsWarning() {
		t.Errorf("AS2 resend on day 8: disposition %+v, want processed/warning: duplicate-document", res.MDN.Disposition)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once (the AS2 resend on day 8 is inside the 30-day window recorded over AS4)", n)
	}
	recs, err = s.Backend.FindInterchanges(context.Background(), dedup.InterchangeQuery{Reference: "XWIN8"})
	if err != nil || len(recs) != 1 || recs[0].Retries != 1 || recs[0].Window != 30*24*time.Hour {
		t.Fatalf("ledger after the AS2 resend: %v %+v", err, recs)
	}
}
