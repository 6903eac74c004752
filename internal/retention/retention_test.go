package retention

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/partners"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func claimAccept(t *testing.T, l dedup.Ledger, ref, msgID string, window time.Duration) {
	t.Helper()
	ic := dedup.Interchange{Key: dedup.HashFields("test", ref), Partner: "acme", Standard: "edifact", Reference: ref}
	d, err := l.ClaimInterchange(context.Background(), dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: "h", MessageID: msgID, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome == dedup.Claimed {
		if err := l.AcceptInterchange(context.Background(), ic.Key, d.Token); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPurgeArchivesBeforeDeletingAndSparesWindows(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := dedup.NewMemoryStore(dedup.Options{}, dedup.MemoryClock(c.now))
	week := 7 * 24 * time.Hour
	claimAccept(t, st, "OLD", "m1", week)
	claimAccept(t, st, "FOREVER", "m2", 0)
	c.add(6 * 24 * time.Hour)
	claimAccept(t, st, "YOUNG", "m3", week)
	c.add(2 * 24 * time.Hour) // OLD is 8 days old, YOUNG 2 days
	// A transport key inside retention and one outside.
	d, _ := st.Claim(context.Background(), dedup.ClaimRequest{Key: dedup.HashFields("t", "x")})
	st.Accept(context.Background(), dedup.HashFields("t", "x"), d.Token, nil)

	dir := t.TempDir()
	p := &Purger{Store: st, Ledger: st, ArchiveDir: dir, Retention: 30 * 24 * time.Hour, Now: c.now}
	rep, err := p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Interchanges != 1 || rep.TransportKeys != 0 || len(rep.Archives) != 1 {
		t.Fatalf("report %+v", rep)
	}
	for _, ref := range []string{"FOREVER", "YOUNG"} {
		if _, err := st.Interchange(context.Background(), dedup.HashFields("test", ref)); err != nil {
			t.Errorf("%s removed: %v", ref, err)
		}
	}
	f, _ := os.Open(rep.Archives[0])
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	var got []ArchivedInterchange
	for sc.Scan() {
		var a ArchivedInterchange
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	if len(got) != 1 || got[0].Reference != "OLD" || got[0].MessageIDs[0] != "m1" || got[0].WindowSeconds != int64(week/time.Second) {
		t.Fatalf("archive %+v", got)
	}
	c.add(31 * 24 * time.Hour)
	rep, _ = p.Run(context.Background())
	if rep.TransportKeys != 1 {
		t.Errorf("transport key past retention not purged: %+v", rep)
	}
}

func TestPurgeWithoutArchiveDirDeletesNothing(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := dedup.NewMemoryStore(dedup.Options{}, dedup.MemoryClock(c.now))
	claimAccept(t, st, "OLD", "m1", time.Hour)
	c.add(2 * time.Hour)
	_, err := (&Purger{Ledger: st, Now: c.now}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "archive") {
		t.Fatalf("err = %v", err)
	}
	if _, err := st.Interchange(context.Background(), dedup.HashFields("test", "OLD")); err != nil {
		t.Fatal("deleted without archive")
	}
}

func TestExportAnswersWhyARetryMadeNoInvoice(t *testing.T) {
	st := dedup.NewMemoryStore(dedup.Options{})
	claimAccept(t, st, "REF1", "m1", 0)
	claimAccept(t, st, "REF1", "m2", 0) // the partner's resend under a new id
	a := &audit.Memory{}
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	ctx := context.Background()
	a.Write(ctx, audit.Record{Time: base, Step: audit.StepDecision, Partner: "acme", MessageID: "m1", Reference: "REF1", Decision: "new-interchange"})
	a.Write(ctx, audit.Record{Time: base.Add(time.Minute), Step: audit.StepReply, Partner: "acme", MessageID: "m1", Disposition: "processed"})
	a.Write(ctx, audit.Record{Time: base.Add(time.Hour), Step: audit.StepDecision, Partner: "acme", MessageID: "m2", Reference: "REF1", Decision: "duplicate-interchange"})
	a.Write(ctx, audit.Record{Time: base.Add(2 * time.Hour), Step: audit.StepDecision, Partner: "other", MessageID: "m9", Decision: "new"})
	ev, err := Export(ctx, st, a, ExportQuery{Reference: "REF1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Interchanges) != 1 || ev.Interchanges[0].Retries != 1 || len(ev.Records) != 3 {
		t.Fatalf("evidence %+v", ev)
	}
	if ev.Records[1].Disposition != "processed" || ev.Records[2].Decision != "duplicate-interchange" {
		t.Errorf("records out of order: %+v", ev.Records)
	}
	ev, _ = Export(ctx, st, a, ExportQuery{Partner: "acme", From: base.Add(30 * time.Minute)})
	if len(ev.Records) != 1 || ev.Records[0].MessageID != "m2" {
		t.Errorf("time range: %+v", ev.Records)
	}
}

// TestCheckWindowsCoversTheAS4ReplayGap: the AS4 endpoint refuses a message
// whose signed time is older than the window plus the clock skew, and that
// time may be one skew ahead of our clock at acceptance; a retention of just
// the window purged the transport key while a replay of the captured message
// could still pass the age check (within 2 × skew) and run the handler again.
func TestCheckWindowsCoversTheAS4ReplayGap(t *testing.T) {
	day := 24 * time.Hour
	as4 := &partners.Partner{ID: "acme", AS4: &partners.AS4{DedupWindow: partners.Duration(30 * day), ClockSkew: partners.Duration(5 * time.Minute)}}
	as2 := &partners.Partner{ID: "beta", AS2: &partners.AS2{DedupWindow: partners.Duration(7 * day)}}
	for _, tc := range []struct {
		retention time.Duration
		ok        bool
	}{
		{30 * day, false},
		{30*day + 5*time.Minute, false},
		{30*day + 10*time.Minute, true},
		{90 * day, true},
	} {
		err := CheckWindows(tc.retention, []*partners.Partner{as2, as4})
		if (err == nil) != tc.ok {
			t.Errorf("retention %s: %v, want ok=%v", tc.retention, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "clock_skew") {
			t.Errorf("retention %s: %v does not name the clock skew", tc.retention, err)
		}
	}
	if err := CheckWindows(7*day, []*partners.Partner{as2}); err != nil {
		t.Errorf("AS2 only, retention = window: %v", err)
	}
}
