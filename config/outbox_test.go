package config

import (
	"strings"
	"testing"
	"time"
)

func TestOutboxLeaseDefaultsAndChecks(t *testing.T) {
	c, err := Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Outbox.Lease != 30*time.Second || c.Outbox.Heartbeat != 0 || c.Outbox.HeartbeatInterval() != 10*time.Second {
		t.Fatalf("outbox defaults: %+v (heartbeat every %s)", c.Outbox, c.Outbox.HeartbeatInterval())
	}
	c, err = Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\noutbox:\n  lease: 12s\n  heartbeat: 2s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Outbox.Lease != 12*time.Second || c.Outbox.HeartbeatInterval() != 2*time.Second {
		t.Fatalf("outbox: %+v", c.Outbox)
	}
	for body, want := range map[string]string{
		"outbox:\n  lease: 500ms\n":                 "outbox.lease: 500ms is shorter than 1s",
		"outbox:\n  lease: 10s\n  heartbeat: 10s\n": "outbox.heartbeat: 10s is not shorter than outbox.lease 10s",
		"outbox:\n  heartbeat: -1s\n":               "outbox.heartbeat: -1s is negative",
		"outbox:\n  leese: 10s\n":                   "leese",
	} {
		_, err := Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\n"+body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %q", body, err, want)
		}
	}
	t.Setenv("GATEWAY_OUTBOX_LEASE", "45s")
	if c, err = Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\n")); err != nil || c.Outbox.Lease != 45*time.Second {
		t.Fatalf("GATEWAY_OUTBOX_LEASE: %v %+v", err, c)
	}
}
