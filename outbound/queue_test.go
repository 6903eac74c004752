package outbound_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/outbound"
)

// failingReader fails the test when the store reads it.
type failingReader struct{ t *testing.T }

func (f failingReader) Read([]byte) (int, error) {
	f.t.Error("the payload of a repeated idempotency key was read")
	return 0, io.ErrUnexpectedEOF
}

// directory resolves acme (AS2 only) and both (AS2 and AS4).
func directory(partner string, p outbound.Protocol) (outbound.Protocol, error) {
	switch partner {
	case "acme":
		if p == "" || p == outbound.AS2 {
			return outbound.AS2, nil
		}
		return "", fmt.Errorf("acme sends as2 only: %w", outbound.ErrNoSending)
	case "both":
		if p == "" {
			return "", fmt.Errorf("both sends as2 and as4; name one: %w", outbound.ErrNoSending)
		}
		return p, nil
	}
	return "", outbound.ErrUnknownPartner
}

func newQueue(st outbound.Store, aud audit.Sink, notified *atomic.Int32) *outbound.Queue {
	return &outbound.Queue{Store: st, Resolve: directory, Audit: aud, Log: slog.New(slog.DiscardHandler), Notify: func() { notified.Add(1) },
		NewMessageID: func(p outbound.Protocol, partner string) (string, error) {
			return outbound.DefaultMessageID(p, partner)
		}}
}

// TestQueueSubmitIdempotent: the same idempotency key returns the message
// queued first without reading the payload, audited "duplicate".
func TestQueueSubmitIdempotent(t *testing.T) {
	ctx := context.Background()
	st := outbound.NewMemory()
	aud := &auditLog{}
	var notified atomic.Int32
	q := newQueue(st, aud, &notified)
	first, created, err := q.Submit(ctx, outbound.Submission{Partner: "acme", IdempotencyKey: "order-42",
		Payload: strings.NewReader("UNB+..."), Filename: "order.edi", Source: "http"})
	if err != nil || !created {
		t.Fatalf("first Submit: %v, created %v", err, created)
	}
	if first.Protocol != outbound.AS2 || !strings.HasPrefix(first.MessageID, "<") || !strings.HasSuffix(first.MessageID, ">") ||
		first.State != outbound.Queued || first.Filename != "order.edi" || first.Source != "http" || first.Size != 7 {
		t.Fatalf("queued %+v", first)
	}
	again, created, err := q.Submit(ctx, outbound.Submission{Partner: "acme", IdempotencyKey: "order-42", Payload: failingReader{t}})
	if err != nil || created || again.ID != first.ID || again.MessageID != first.MessageID {
		t.Fatalf("repeated Submit: %v, created %v, %s/%s want %s/%s", err, created, again.ID, again.MessageID, first.ID, first.MessageID)
	}
	if n := notified.Load(); n != 1 {
		t.Fatalf("Notify called %d times, want once (for the new message)", n)
	}
	recs := aud.step(audit.StepSubmit)
	if len(recs) != 2 || recs[0].Decision != "queued" || recs[1].Decision != "duplicate" ||
		recs[1].MessageID != first.MessageID || recs[1].Partner != "acme" || recs[1].Protocol != "as2" || recs[0].PayloadSHA256 != first.SHA256 {
		t.Fatalf("audit %+v", recs)
	}
	if ms, _ := st.List(ctx, outbound.Filter{}); len(ms) != 1 {
		t.Fatalf("%d messages queued, want 1", len(ms))
	}
}

// TestQueueSubmitErrors: an unknown partner, a protocol the partner does not
// send with, an ambiguous one, a missing partner or payload are refused with
// the errors the HTTP API maps; nothing is queued.
func TestQueueSubmitErrors(t *testing.T) {
	ctx := context.Background()
	st := outbound.NewMemory()
	var notified atomic.Int32
	q := newQueue(st, nil, &notified)
	for _, c := range []struct {
		name string
		s    outbound.Submission
		want error
	}{
		{"unknown partner", outbound.Submission{Partner: "nobody", Payload: strings.NewReader("x")}, outbound.ErrUnknownPartner},
		{"no AS4 sending", outbound.Submission{Partner: "acme", Protocol: outbound.AS4, Payload: strings.NewReader("x")}, outbound.ErrNoSending},
		{"ambiguous", outbound.Submission{Partner: "both", Payload: strings.NewReader("x")}, outbound.ErrNoSending},
		{"no partner", outbound.Submission{Payload: strings.NewReader("x")}, outbound.ErrInvalid},
		{"no payload", outbound.Submission{Partner: "acme"}, outbound.ErrInvalid},
		{"bad protocol", outbound.Submission{Partner: "acme", Protocol: "ftp", Payload: strings.NewReader("x")}, outbound.ErrInvalid},
	} {
		_, _, err := q.Submit(ctx, c.s)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if ms, _ := st.List(ctx, outbound.Filter{}); len(ms) != 0 || notified.Load() != 0 {
		t.Fatalf("%d messages queued, %d notifications", len(ms), notified.Load())
	}
	m, _, err := q.Submit(ctx, outbound.Submission{Partner: "both", Protocol: outbound.AS4, Payload: strings.NewReader("x")})
	if err != nil || m.Protocol != outbound.AS4 || strings.HasPrefix(m.MessageID, "<") || m.Source != "api" {
		t.Fatalf("AS4 submission: %v %+v", err, m)
	}
}

// TestQueueSubmitThenSend: a submission through the Queue wakes the Sender,
// which delivers it.
func TestQueueSubmitThenSend(t *testing.T) {
	st := outbound.NewMemory()
	tr := newTransmitter(nil)
	r := start(t, outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{outbound.AS2: tr},
		Poll: time.Hour})
	q := &outbound.Queue{Store: st, Resolve: directory, Notify: r.s.Notify, Log: slog.New(slog.DiscardHandler)}
	m, _, err := q.Submit(context.Background(), outbound.Submission{Partner: "acme", Payload: strings.NewReader("x")})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delivered", func() bool { return get(t, st, m.ID).State == outbound.Delivered })
}

// TestQueueSubmitProperties: AS4 properties are queued in their order;
// invalid ones, and any for AS2, are refused with ErrInvalid and a reason,
// nothing queued.
func TestQueueSubmitProperties(t *testing.T) {
	ctx := context.Background()
	st := outbound.NewMemory()
	var notified atomic.Int32
	q := newQueue(st, nil, &notified)
	props := []outbound.Property{{Name: "BDEWDocumentType", Value: "UTILMD"}, {Name: "BDEWDocumentNo", Value: "4711"},
		{Name: "CharacterSet", Value: "utf-8"}}
	m, created, err := q.Submit(ctx, outbound.Submission{Partner: "both", Protocol: outbound.AS4,
		Payload: strings.NewReader("UNB+..."), Properties: props})
	if err != nil || !created {
		t.Fatalf("Submit: created %v, %v", created, err)
	}
	if got, _ := st.Get(ctx, m.ID); !outbound.EqualProperties(got.Properties, props) {
		t.Errorf("stored properties %q, want %q", got.Properties, props)
	}
	long := strings.Repeat("x", 65)
	many := make([]outbound.Property, 33)
	for i := range many {
		many[i] = outbound.Property{Name: fmt.Sprintf("P%d", i), Value: "v"}
	}
	for _, c := range []struct {
		partner  string
		protocol outbound.Protocol
		props    []outbound.Property
		reason   string
	}{
		{"acme", "", props, "AS2"},
		{"both", outbound.AS2, props, "AS2"},
		{"both", outbound.AS4, many, "33 properties: at most 32"},
		{"both", outbound.AS4, []outbound.Property{{Name: "", Value: "v"}}, "empty name"},
		{"both", outbound.AS4, []outbound.Property{{Name: long, Value: "v"}}, "longer than 64"},
		{"both", outbound.AS4, []outbound.Property{{Name: "a b", Value: "v"}}, "only A-Z"},
		{"both", outbound.AS4, []outbound.Property{{Name: "Doc", Value: "a\nb"}}, "control character"},
		{"both", outbound.AS4, []outbound.Property{{Name: "Doc", Value: "\xff"}}, "not UTF-8"},
		{"both", outbound.AS4, []outbound.Property{{Name: "Doc", Value: strings.Repeat("ü", 513)}}, "1026 bytes"},
		{"both", outbound.AS4, []outbound.Property{{Name: "Doc", Value: "1"}, {Name: "doc", Value: "2"}}, "twice"},
		{"both", outbound.AS4, []outbound.Property{{Name: "mimetype", Value: "text/plain"}}, "reserved"},
		{"both", outbound.AS4, []outbound.Property{{Name: "CompressionType", Value: "application/gzip"}}, "reserved"},
	} {
		_, _, err := q.Submit(ctx, outbound.Submission{Partner: c.partner, Protocol: c.protocol,
			Payload: strings.NewReader("x"), Properties: c.props})
		if !errors.Is(err, outbound.ErrInvalid) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s %s %.40q: %v, want ErrInvalid saying %q", c.partner, c.protocol, c.props, err, c.reason)
		}
	}
	if ms, _ := st.List(ctx, outbound.Filter{}); len(ms) != 1 {
		t.Errorf("%d messages queued, want the one valid submission", len(ms))
	}
}
