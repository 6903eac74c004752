package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestMemoryShareOptOutWarned: limits.memory_share_per_source or
// memory_share_per_partner at 100 lets one sender hold the whole memory
// budget (issue 22 item 2); the start-up log says so, and the defaults say
// nothing.
func TestMemoryShareOptOutWarned(t *testing.T) {
	for _, tc := range []struct {
		source, partner int
		want            []string
	}{
		{0, 0, nil},
		{50, 50, nil},
		{100, 50, []string{"limits.memory_share_per_source is 100"}},
		{50, 100, []string{"limits.memory_share_per_partner is 100"}},
	} {
		cfg := demoConfig(t)
		cfg.SpoolDir = t.TempDir()
		cfg.Limits.MemorySharePerSource, cfg.Limits.MemorySharePerPartner = tc.source, tc.partner
		var logs syncBuffer
		s, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		out := logs.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("shares %d/%d: no warning %q in:\n%s", tc.source, tc.partner, w, out)
			}
		}
		if tc.want == nil && strings.Contains(out, "memory_share_per") {
			t.Errorf("shares %d/%d: a warning about the shares:\n%s", tc.source, tc.partner, out)
		}
	}
}
