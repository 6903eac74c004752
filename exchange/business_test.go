package exchange

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

func invoic(ref, body string) string {
	return "UNA:+.? 'UNB+UNOA:2+SENDER:14+RECEIVER:14+261130:0930+" + ref + "'UNH+1+INVOIC:D:96A:UN'BGM+380+" + body + "+9'UNT+3+1'UNZ+1+" + ref + "'"
}

// dupProtocol also implements InterchangeDuplicateReplies.
type dupReplies struct{ testReplies }

func (r dupReplies) DuplicateInterchange(ctx context.Context, dups []InterchangeDuplicate) (Reply, error) {
	return Reply{Status: 200, Body: []byte(fmt.Sprintf("duplicate interchange %s retries=%d", dups[0].Interchange.Reference, dups[0].Retries)),
		Disposition: "processed/warning: duplicate-document"}, nil
}

type ledgerFixture struct {
	p     *Pipeline
	h     *countingHandler
	a     *audit.Memory
	st    *dedup.MemoryStore
	proto *testProtocol
	now   time.Time
	mu    sync.Mutex
}

func newLedgerFixture(t *testing.T) *ledgerFixture {
	f := &ledgerFixture{h: &countingHandler{}, a: &audit.Memory{}, proto: &testProtocol{}, now: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	f.st = dedup.NewMemoryStore(dedup.Options{Lease: time.Minute}, dedup.MemoryClock(f.clock))
	f.p = &Pipeline{Store: f.st, Ledger: f.st, Audit: f.a, Handler: f.h, Lease: time.Minute,
		Log: slog.New(slog.DiscardHandler), Quarantine: t.TempDir(), Now: f.clock}
	return f
}

func (f *ledgerFixture) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *ledgerFixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func (f *ledgerFixture) send(id string, window time.Duration, policy DriftPolicy, payloads ...string) Reply {
	in := f.proto.inbound("acme", id, payloads[0])
	for _, extra := range payloads[1:] {
		in.Message.Payloads = append(in.Message.Payloads, NewPayload(Payload{SHA256: sha(extra), Size: int64(len(extra))}, MemoryBody(extra)))
	}
	in.Replies = dupReplies{in.Replies.(testReplies)}
	in.Window, in.OnDrift = window, policy
	return f.p.Process(context.Background(), in)
}

func decisions(a *audit.Memory) string {
	var out []string
	for _, r := range a.Records() {
		if r.Step == audit.StepDecision {
			out = append(out, r.Decision)
		}
	}
	return strings.Join(out, ",")
}

func TestSameInterchangeUnderNewMessageIDIsDuplicate(t *testing.T) {
	f := newLedgerFixture(t)
	r1 := f.send("m1", 0, "", invoic("REF1", "INV-1"))
	r2 := f.send("m2", 0, "", invoic("REF1", "INV-1"))
	r3 := f.send("m3", 0, "", invoic("REF1", "INV-1"))
	if f.h.n() != 1 {
		t.Fatalf("handler ran %d times", f.h.n())
	}
	if !strings.HasPrefix(string(r1.Body), "receipt") || string(r3.Body) != "duplicate interchange REF1 retries=2" || r2.Status != 200 {
		t.Fatalf("replies: %q / %q / %q", r1.Body, r2.Body, r3.Body)
	}
	recs, _ := f.st.FindInterchanges(context.Background(), dedup.InterchangeQuery{Reference: "REF1"})
	if len(recs) != 1 || recs[0].Retries != 2 || strings.Join(recs[0].MessageIDs, ",") != "m1,m2,m3" || recs[0].Sender != "14:SENDER" {
		t.Fatalf("ledger evidence: %+v", recs)
	}
	if got := decisions(f.a); got != "new,new-interchange,new,duplicate-interchange,new,duplicate-interchange" {
		t.Errorf("audit decisions %s", got)
	}
	// A retransmission of m2 (same transport id) gets m2's stored reply.
	if r := f.send("m2", 0, "", invoic("REF1", "INV-1")); string(r.Body) != string(r2.Body) {
		t.Errorf("transport duplicate of m2: %q", r.Body)
	}
}

func TestConcurrentDeliveriesOfOneInterchangeRunHandlerOnce(t *testing.T) {
	f := newLedgerFixture(t)
	f.h.fn = func(*Message) error { time.Sleep(10 * time.Millisecond); return nil }
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.send(fmt.Sprintf("m%d", i), 0, "", invoic("REF1", "INV-1")).Status == 200 {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if f.h.n() != 1 {
		t.Fatalf("handler ran %d times", f.h.n())
	}
	// Those answered 503 retry and get the duplicate reply.
	for i := 0; i < 16; i++ {
		f.send(fmt.Sprintf("m%d", i), 0, "", invoic("REF1", "INV-1"))
	}
	if f.h.n() != 1 {
		t.Fatalf("handler ran %d times after retries", f.h.n())
	}
}

func TestInterchangeDriftPolicies(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		f := newLedgerFixture(t)
		f.send("m1", 0, "", invoic("REF1", "INV-1"))
		r := f.send("m2", 0, DriftReject, invoic("REF1", "INV-CHANGED"))
		body := string(r.Body)
		if !strings.HasPrefix(body, "failed kind=2") || !strings.Contains(body, "REF1") ||
			!strings.Contains(body, sha(invoic("REF1", "INV-1"))) || !strings.Contains(body, sha(invoic("REF1", "INV-CHANGED"))) {
			t.Fatalf("reply %q", body)
		}
		if f.h.n() != 1 || f.p.Stats.Drift.Load() != 1 || !strings.Contains(decisions(f.a), "drift") {
			t.Fatalf("handler %d, drift %d, decisions %s", f.h.n(), f.p.Stats.Drift.Load(), decisions(f.a))
		}
		// The transport claim was released: the same message is rejected again, not replayed.
		if r := f.send("m2", 0, DriftReject, invoic("REF1", "INV-CHANGED")); !strings.HasPrefix(string(r.Body), "failed kind=2") {
			t.Fatalf("retransmission: %q", r.Body)
		}
	})
	t.Run("quarantine", func(t *testing.T) {
		f := newLedgerFixture(t)
		f.send("m1", 0, "", invoic("REF1", "INV-1"))
		r := f.send("m2", 0, DriftQuarantine, invoic("REF1", "INV-CHANGED"))
		if !strings.HasPrefix(string(r.Body), "failed kind=3") || f.h.n() != 1 {
			t.Fatalf("reply %q, handler %d", r.Body, f.h.n())
		}
		files, _ := filepath.Glob(filepath.Join(f.p.Quarantine, "acme", "*.payload"))
		if len(files) != 1 {
			t.Fatalf("quarantine files %v", files)
		}
		b, _ := os.ReadFile(files[0])
		meta, _ := os.ReadFile(strings.TrimSuffix(files[0], ".payload") + ".json")
		if string(b) != invoic("REF1", "INV-CHANGED") || !strings.Contains(string(meta), `"reference": "REF1"`) {
			t.Fatalf("quarantined %q meta %s", b, meta)
		}
		if !strings.Contains(decisions(f.a), "quarantined") {
			t.Errorf("decisions %s", decisions(f.a))
		}
		// The partner retransmits the same message: still refused, kept once.
		if r := f.send("m2", 0, DriftQuarantine, invoic("REF1", "INV-CHANGED")); !strings.HasPrefix(string(r.Body), "failed kind=3") {
			t.Fatalf("retransmission: %q", r.Body)
		}
		if files, _ := filepath.Glob(filepath.Join(f.p.Quarantine, "acme", "*")); len(files) != 2 {
			t.Fatalf("quarantine holds %v after a retransmission, want one payload and its description", files)
		}
	})
	t.Run("accept", func(t *testing.T) {
		f := newLedgerFixture(t)
		f.send("m1", 0, "", invoic("REF1", "INV-1"))
		f.advance(time.Second) // a resend never arrives in the same instant
		r := f.send("m2", 0, DriftAccept, invoic("REF1", "INV-CHANGED"))
		if !strings.HasPrefix(string(r.Body), "receipt") || f.h.n() != 2 || !strings.Contains(decisions(f.a), "drift-accepted") {
			t.Fatalf("reply %q, handler %d, decisions %s", r.Body, f.h.n(), decisions(f.a))
		}
	})
}

func TestWindowExpiryReusesReference(t *testing.T) {
	f := newLedgerFixture(t)
	week := 7 * 24 * time.Hour
	f.send("m1", week, "", invoic("REF1", "INV-1"))
	f.advance(week - time.Minute)
	if r := f.send("m2", week, "", invoic("REF1", "INV-1")); !strings.HasPrefix(string(r.Body), "duplicate interchange") {
		t.Fatalf("inside window: %q", r.Body)
	}
	f.advance(2 * time.Minute)
	if r := f.send("m3", week, "", invoic("REF1", "INV-1")); !strings.HasPrefix(string(r.Body), "receipt") || f.h.n() != 2 {
		t.Fatalf("after window: %q, handler %d", r.Body, f.h.n())
	}
	if !strings.Contains(decisions(f.a), "reused-interchange") {
		t.Errorf("reuse not audited: %s", decisions(f.a))
	}
}

const sbdh = `<?xml version="1.0"?><StandardBusinessDocument xmlns="http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader"><StandardBusinessDocumentHeader><HeaderVersion>1.0</HeaderVersion><Sender><Identifier Authority="iso6523-actorid-upis">9915:a</Identifier></Sender><Receiver><Identifier Authority="iso6523-actorid-upis">9915:b</Identifier></Receiver><DocumentIdentification><Standard>urn:oasis:names:specification:ubl:schema:xsd:Invoice-2</Standard><TypeVersion>2.1</TypeVersion><InstanceIdentifier>INST-1</InstanceIdentifier><Type>Invoice</Type><CreationDateAndTime>2026-11-30T10:00:00Z</CreationDateAndTime></DocumentIdentification></StandardBusinessDocumentHeader><Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"/></StandardBusinessDocument>`

func TestPeppolInstanceIdentifierIsUniqueForever(t *testing.T) {
	f := newLedgerFixture(t)
	f.send("m1", 24*time.Hour, "", sbdh)
	f.advance(400 * 24 * time.Hour)
	if r := f.send("m2", 24*time.Hour, "", sbdh); !strings.HasPrefix(string(r.Body), "duplicate interchange INST-1") || f.h.n() != 1 {
		t.Fatalf("reply %q handler %d", r.Body, f.h.n())
	}
}

func TestDamagedEnvelopeIsRefused(t *testing.T) {
	f := newLedgerFixture(t)
	damaged := strings.Replace(invoic("REF1", "X"), "UNZ+1+REF1", "UNZ+1+REF2", 1)
	r := f.send("m1", 0, "", damaged)
	if !strings.HasPrefix(string(r.Body), "failed kind=4") || !strings.Contains(string(r.Body), "UNZ") || f.h.n() != 0 {
		t.Fatalf("reply %q handler %d", r.Body, f.h.n())
	}
	// Nothing was claimed: the corrected message goes through.
	if r := f.send("m1", 0, "", invoic("REF1", "X")); !strings.HasPrefix(string(r.Body), "receipt") {
		t.Fatalf("corrected: %q", r.Body)
	}
}

func TestOnlyNewInterchangesReachTheHandler(t *testing.T) {
	f := newLedgerFixture(t)
	f.send("m1", 0, "", invoic("REF1", "A"))
	var got []string
	f.h.fn = func(m *Message) error {
		for _, p := range m.Payloads {
			r, _ := p.Open()
			b := make([]byte, 4096)
			n, _ := r.Read(b)
			got = append(got, string(b[:n]))
		}
		if len(m.DuplicatePayloads) != 1 {
			t.Errorf("duplicate payloads %d", len(m.DuplicatePayloads))
		}
		return nil
	}
	f.send("m2", 0, "", invoic("REF1", "A"), invoic("REF2", "B"), "free text without envelope")
	if len(got) != 2 || got[0] != invoic("REF2", "B") || got[1] != "free text without envelope" {
		t.Fatalf("handler got %q", got)
	}
}

func TestHandlerFailureReleasesInterchange(t *testing.T) {
	f := newLedgerFixture(t)
	fail := true
	f.h.fn = func(*Message) error {
		if fail {
			return fmt.Errorf("erp down")
		}
		return nil
	}
	f.send("m1", 0, "", invoic("REF1", "A"))
	fail = false
	// The partner's EDI system resends under a new id: processed, not a duplicate.
	if r := f.send("m2", 0, "", invoic("REF1", "A")); !strings.HasPrefix(string(r.Body), "receipt") || f.h.n() != 2 {
		t.Fatalf("reply %q handler %d", r.Body, f.h.n())
	}
}

// TestQuarantineKeepsEveryPayloadOfADriftedMessage: drift on the message id
// keeps all payloads of the message as one item (files in message order,
// a description listing their hashes, the message's hash); drift of one
// interchange keeps only its payload, as before.
func TestQuarantineKeepsEveryPayloadOfADriftedMessage(t *testing.T) {
	t.Run("message-id", func(t *testing.T) {
		f := newLedgerFixture(t)
		f.send("m1", 0, "", "first one", "first two")
		r := f.send("m1", 0, DriftQuarantine, "second one", "second two")
		if !strings.HasPrefix(string(r.Body), "failed kind=3") || f.h.n() != 1 {
			t.Fatalf("reply %q, handler %d", r.Body, f.h.n())
		}
		metas, _ := filepath.Glob(filepath.Join(f.p.Quarantine, "acme", "*.json"))
		if len(metas) != 1 {
			t.Fatalf("descriptions %v", metas)
		}
		base := strings.TrimSuffix(metas[0], ".json")
		for i, want := range []string{"second one", "second two"} {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(base), quarantineFile(filepath.Base(base), i)))
			if err != nil || string(b) != want {
				t.Errorf("payload %d: %q %v", i+1, b, err)
			}
		}
		var meta struct {
			PayloadSHA256 string `json:"payload_sha256"`
			Payloads      []struct {
				File   string `json:"file"`
				SHA256 string `json:"sha256"`
			} `json:"payloads"`
		}
		b, _ := os.ReadFile(metas[0])
		if err := json.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		m := &Message{Payloads: []Payload{{SHA256: sha("second one")}, {SHA256: sha("second two")}}}
		if meta.PayloadSHA256 != PayloadSHA256(m) || len(meta.Payloads) != 2 || meta.Payloads[0].SHA256 != sha("second one") ||
			meta.Payloads[1].SHA256 != sha("second two") || meta.Payloads[1].File != filepath.Base(base)+".2.payload" {
			t.Errorf("description %s", b)
		}
	})
	t.Run("interchange", func(t *testing.T) {
		f := newLedgerFixture(t)
		f.send("m1", 0, "", invoic("REF1", "INV-1"))
		r := f.send("m2", 0, DriftQuarantine, "a note", invoic("REF1", "INV-CHANGED"))
		if !strings.HasPrefix(string(r.Body), "failed kind=3") {
			t.Fatalf("reply %q", r.Body)
		}
		files, _ := filepath.Glob(filepath.Join(f.p.Quarantine, "acme", "*.payload"))
		if len(files) != 1 {
			t.Fatalf("quarantine files %v, want the drifted interchange's payload only", files)
		}
		if b, _ := os.ReadFile(files[0]); string(b) != invoic("REF1", "INV-CHANGED") || !strings.Contains(files[0], sha(invoic("REF1", "INV-CHANGED"))[:16]) {
			t.Errorf("quarantined %s: %q", files[0], b)
		}
	})
}

// cycleReader repeats s without end.
type cycleReader struct {
	s   string
	off int
}

func (c *cycleReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.s[c.off:])
		n += k
		c.off = (c.off + k) % len(c.s)
	}
	return n, nil
}

// TestLargeInterchangeResentIsDuplicate: a 70 MiB EDIFACT price catalogue
// (more than the 64 MiB the envelope scan used to read whole) spooled to a
// file and resent under a new message id is a duplicate interchange: the
// handler runs once.
func TestLargeInterchangeResentIsDuplicate(t *testing.T) {
	if testing.Short() {
		t.Skip("spools 2 × 70 MiB")
	}
	const size = 70 << 20
	line := "LIN+1++4000862141404:SRS'PIA+1+ABC123:SA'PRI+AAA:27.50:CT'QTY+21:5'\n"
	sp := &Spool{Dir: t.TempDir(), Threshold: 1 << 20}
	defer sp.Cleanup()
	f := newLedgerFixture(t)
	send := func(id string) Reply {
		r := io.MultiReader(strings.NewReader("UNA:+.? 'UNB+UNOC:3+SENDER:14+RECEIVER:14+261130:0930+PC7'UNH+1+PRICAT:D:96A:UN'"),
			io.LimitReader(&cycleReader{s: line}, size/int64(len(line))*int64(len(line))), strings.NewReader("UNT+9+1'UNZ+1+PC7'"))
		body, n, h, err := sp.Store(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := body.(FileBody); !ok || n <= 64<<20 {
			t.Fatalf("stored %T of %d bytes", body, n)
		}
		in := f.proto.inbound("acme", id, "")
		in.Message.Payloads = []Payload{NewPayload(Payload{ContentType: "application/edifact", SHA256: h, Size: n}, body)}
		in.Replies = dupReplies{in.Replies.(testReplies)}
		return f.p.Process(context.Background(), in)
	}
	r1 := send("m1")
	r2 := send("m2")
	if f.h.n() != 1 {
		t.Fatalf("handler ran %d times", f.h.n())
	}
	if !strings.HasPrefix(string(r1.Body), "receipt") || string(r2.Body) != "duplicate interchange PC7 retries=1" {
		t.Fatalf("replies: %q / %q", r1.Body, r2.Body)
	}
	if got := decisions(f.a); got != "new,new-interchange,new,duplicate-interchange" {
		t.Errorf("audit decisions %s", got)
	}
}
