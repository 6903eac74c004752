package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// TestPurgeRemovesOldFinalOutbound: the purge serve runs every
// purge_interval deletes the outbound messages final for longer than
// outbound.retention, with their payloads, and keeps a queued message as
// old and a final message more recent.
func TestPurgeRemovesOldFinalOutbound(t *testing.T) {
	ctx := context.Background()
	cfg := demoConfig(t)
	cfg.Outbound.Retention = 300 * time.Millisecond
	s, err := New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ob := s.outboundStore()
	if ob == nil {
		t.Fatal("no outbound store")
	}
	submit := func(id string) {
		t.Helper()
		if _, _, err := ob.Submit(ctx, outbound.Message{ID: id, Partner: "acme", Protocol: outbound.AS2, MessageID: "<" + id + "@gw>"},
			strings.NewReader("UNB+"+id+"'")); err != nil {
			t.Fatal(err)
		}
	}
	submit("old-cancelled")
	submit("old-queued")
	if err := ob.Cancel(ctx, "old-cancelled", "operator"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(cfg.Outbound.Retention + 100*time.Millisecond)
	submit("recent-cancelled")
	if err := ob.Cancel(ctx, "recent-cancelled", "operator"); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Purger().Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OutboundMessages != 1 {
		t.Errorf("purge removed %d outbound messages, want 1", rep.OutboundMessages)
	}
	if _, err := ob.Get(ctx, "old-cancelled"); !errors.Is(err, outbound.ErrNotFound) {
		t.Errorf("old cancelled message: %v, want ErrNotFound", err)
	}
	if _, err := ob.OpenPayload(ctx, "old-cancelled"); !errors.Is(err, outbound.ErrNotFound) {
		t.Errorf("old cancelled message's payload: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"old-queued", "recent-cancelled"} {
		if _, err := ob.Get(ctx, id); err != nil {
			t.Errorf("%s: %v, want kept", id, err)
		}
	}
	// outbound.retention 0 keeps everything.
	s.Config.Outbound.Retention = 0
	time.Sleep(400 * time.Millisecond)
	if rep, err := s.Purger().Run(ctx); err != nil || rep.OutboundMessages != 0 {
		t.Errorf("purge with outbound.retention 0: %+v, %v", rep, err)
	}
	if _, err := ob.Get(ctx, "recent-cancelled"); err != nil {
		t.Errorf("recent-cancelled with outbound.retention 0: %v", err)
	}
}
