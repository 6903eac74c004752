package exchange

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/edigateway/gateway/dedup"
)

// ctxStore behaves like the SQL stores: a cancelled context fails every
// statement.
type ctxStore struct{ *dedup.MemoryStore }

func (s ctxStore) Accept(ctx context.Context, k dedup.Key, t dedup.Token, reply []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ctxstore: accept: %w", err)
	}
	return s.MemoryStore.Accept(ctx, k, t, reply)
}

func (s ctxStore) AcceptInterchange(ctx context.Context, k dedup.Key, t dedup.Token) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ctxstore: accept interchange: %w", err)
	}
	return s.MemoryStore.AcceptInterchange(ctx, k, t)
}

// A partner that hangs up while the handler runs must not cause a second
// handler run: once the handler succeeded, its claim is accepted whatever
// happened to the request, and the retransmission is a duplicate.
func TestClientDisconnectAfterHandlerSuccessStillAccepts(t *testing.T) {
	for _, ledger := range []bool{false, true} {
		t.Run(fmt.Sprintf("ledger=%v", ledger), func(t *testing.T) {
			f := newLedgerFixture(t)
			st := ctxStore{f.st}
			f.p.Store = st
			if ledger {
				f.p.Ledger = st
			} else {
				f.p.Ledger = nil
			}
			ctx, hangUp := context.WithCancel(context.Background())
			f.p.Handler = HandlerFunc(func(context.Context, *Message) error {
				f.h.Handle(ctx, nil)
				hangUp() // the side effect is done; the client disconnects now
				return nil
			})
			in := f.proto.inbound("acme", "m1", invoic("REF1", "A"))
			f.p.Process(ctx, in)

			r := f.send("m1", 0, DriftReject, invoic("REF1", "A"))
			if f.h.n() != 1 {
				t.Fatalf("handler ran %d times after a disconnect and a retransmission, want 1", f.h.n())
			}
			if r.Status != 200 || r.Disposition != "processed/warning: duplicate-document" {
				t.Fatalf("retransmission answered %d %q %q, want the duplicate reply", r.Status, r.Disposition, r.Body)
			}
		})
	}
}

// failFirstInterchangeAccept fails the accept of one interchange key.
type failInterchangeAccept struct {
	*dedup.MemoryStore
	fail dedup.Key
}

func (s failInterchangeAccept) AcceptInterchange(ctx context.Context, k dedup.Key, t dedup.Token) error {
	if k == s.fail {
		return fmt.Errorf("connection reset: %w", dedup.ErrUnavailable)
	}
	return s.MemoryStore.AcceptInterchange(ctx, k, t)
}

// When one interchange accept fails after the handler ran, the other
// interchanges of the message must not stay claimed (which answers every
// retransmission 503 until the lease runs out): they are accepted, since the
// handler processed them, and the retransmission reprocesses only the one
// whose accept failed.
func TestInterchangeAcceptFailureLeavesNoClaimHeld(t *testing.T) {
	f := newLedgerFixture(t)
	in := f.proto.inbound("acme", "m1", invoic("REF1", "A"))
	ics, err := f.p.extractInterchanges(in.Message)
	if err != nil || len(ics) != 1 {
		t.Fatalf("extract: %v %d", err, len(ics))
	}
	f.p.Ledger = failInterchangeAccept{f.st, ics[0].ic.Key}
	r := f.send("m1", 0, DriftReject, invoic("REF1", "A"), invoic("REF2", "B"))
	if r.Status != 503 || f.h.n() != 1 {
		t.Fatalf("first delivery: %d %q, handler %d", r.Status, r.Body, f.h.n())
	}
	f.p.Ledger = f.st
	var got int
	f.h.fn = func(m *Message) error { got = len(m.Payloads); return nil }
	r = f.send("m1", 0, DriftReject, invoic("REF1", "A"), invoic("REF2", "B"))
	if r.Status != 200 || f.h.n() != 2 || got != 1 {
		t.Fatalf("retransmission: %d %q, handler runs %d, payloads %d (want 200, 2, 1)", r.Status, r.Body, f.h.n(), got)
	}
}

// A message carrying one interchange twice claimed it twice, found its own
// claim in flight and answered 503 to every retransmission, for ever. The
// copy is a duplicate payload: one handler run, one interchange; a copy with
// other content under the same reference is refused as damaged.
func TestSameInterchangeTwiceInOneMessage(t *testing.T) {
	f := newLedgerFixture(t)
	var got, dups int
	f.h.fn = func(m *Message) error { got, dups = len(m.Payloads), len(m.DuplicatePayloads); return nil }
	r := f.send("m1", 0, DriftReject, invoic("REF1", "A"), invoic("REF1", "A"))
	if r.Status != 200 || !strings.HasPrefix(string(r.Body), "receipt") || f.h.n() != 1 || got != 1 || dups != 1 {
		t.Fatalf("reply %d %q, handler %d, payloads %d, duplicate payloads %d", r.Status, r.Body, f.h.n(), got, dups)
	}
	r = f.send("m2", 0, DriftReject, invoic("REF2", "A"), invoic("REF2", "B"))
	if r.Status != 200 || !strings.HasPrefix(string(r.Body), "failed kind=4") || f.h.n() != 1 {
		t.Fatalf("conflicting copies: %d %q, handler %d", r.Status, r.Body, f.h.n())
	}
	// Nothing stays claimed: the corrected message is processed.
	r = f.send("m3", 0, DriftReject, invoic("REF2", "A"))
	if r.Status != 200 || f.h.n() != 2 {
		t.Fatalf("after refusal: %d %q, handler %d", r.Status, r.Body, f.h.n())
	}
}
