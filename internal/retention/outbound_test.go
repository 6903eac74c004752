package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// TestPurgeOutbound: Run deletes, in batches, every outbound message final
// for longer than OutboundRetention, and keeps the queued ones whatever
// their age and the final ones more recent; OutboundRetention 0 keeps
// everything.
func TestPurgeOutbound(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ob := outbound.NewMemory(outbound.MemoryClock(clk.now))
	submit := func(id string) {
		t.Helper()
		if _, _, err := ob.Submit(ctx, outbound.Message{ID: id, Partner: "acme", Protocol: outbound.AS2, MessageID: "<" + id + "@gw>"},
			strings.NewReader(id)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 7 {
		id := fmt.Sprintf("old-%d", i)
		submit(id)
		if err := ob.Cancel(ctx, id, "operator"); err != nil {
			t.Fatal(err)
		}
	}
	submit("old-queued")
	clk.add(10 * 24 * time.Hour)
	submit("recent")
	if err := ob.Cancel(ctx, "recent", "operator"); err != nil {
		t.Fatal(err)
	}
	clk.add(24 * time.Hour)

	p := &Purger{Outbound: ob, Now: clk.now, Batch: 3}
	if rep, err := p.Run(ctx); err != nil || rep.OutboundMessages != 0 {
		t.Fatalf("OutboundRetention 0: %+v, %v; want nothing purged", rep, err)
	}
	p.OutboundRetention = 5 * 24 * time.Hour
	rep, err := p.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OutboundMessages != 7 {
		t.Errorf("purged %d outbound messages, want 7 (in batches of 3)", rep.OutboundMessages)
	}
	for i := range 7 {
		if _, err := ob.Get(ctx, fmt.Sprintf("old-%d", i)); !errors.Is(err, outbound.ErrNotFound) {
			t.Errorf("old-%d: %v, want ErrNotFound", i, err)
		}
	}
	for _, id := range []string{"old-queued", "recent"} {
		if _, err := ob.Get(ctx, id); err != nil {
			t.Errorf("%s: %v, want kept", id, err)
		}
	}
	if rep, err := p.Run(ctx); err != nil || rep.OutboundMessages != 0 {
		t.Errorf("second run: %+v, %v; want nothing purged", rep, err)
	}
}
