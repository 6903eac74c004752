package config

import (
	"path/filepath"
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

func TestOutboundDefaultsAndChecks(t *testing.T) {
	c, err := Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Outbound
	if o.PickupDir != "" || o.PickupInterval != 2*time.Second || o.Workers != 4 || o.Lease != 30*time.Second ||
		o.Heartbeat != 0 || o.HeartbeatInterval() != 10*time.Second || o.MaxPayloadBytes != 1<<30 ||
		o.Retention != 90*24*time.Hour {
		t.Fatalf("outbound defaults: %+v", o)
	}
	path := write(t, "listen: \":9999\"\nstore: \"memory:\"\noutbound:\n  pickup_dir: pickup\n  pickup_interval: 500ms\n  workers: 9\n  lease: 12s\n  heartbeat: 2s\n  max_payload_bytes: 1000\n  retention: 0s\n")
	c, err = Load(path)
	if err != nil {
		t.Fatal(err)
	}
	o = c.Outbound
	if o.PickupDir != filepath.Join(filepath.Dir(path), "pickup") || o.PickupInterval != 500*time.Millisecond || o.Workers != 9 ||
		o.Lease != 12*time.Second || o.HeartbeatInterval() != 2*time.Second || o.MaxPayloadBytes != 1000 || o.Retention != 0 {
		t.Fatalf("outbound: %+v", o)
	}
	for body, want := range map[string]string{
		"outbound:\n  lease: 500ms\n":                 "outbound.lease: 500ms is shorter than 1s",
		"outbound:\n  lease: 10s\n  heartbeat: 10s\n": "outbound.heartbeat: 10s is not shorter than outbound.lease 10s",
		"outbound:\n  heartbeat: -1s\n":               "outbound.heartbeat: -1s is negative",
		"outbound:\n  workers: 0\n":                   "outbound.workers: 0 is not between 1 and 1024",
		"outbound:\n  pickup_interval: 10ms\n":        "outbound.pickup_interval: 10ms is shorter than 100ms",
		"outbound:\n  max_payload_bytes: 0\n":         "outbound.max_payload_bytes: 0 is not positive",
		"outbound:\n  retention: -1h\n":               "outbound.retention: -1h0m0s is negative",
		"outbound:\n  pikup_dir: x\n":                 "pikup_dir",
	} {
		_, err := Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\n"+body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %q", body, err, want)
		}
	}
	t.Setenv("GATEWAY_OUTBOUND_PICKUP_DIR", "/srv/pickup")
	t.Setenv("GATEWAY_OUTBOUND_MAX_PAYLOAD_BYTES", "2048")
	if c, err = Load(write(t, "listen: \":9999\"\nstore: \"memory:\"\n")); err != nil || c.Outbound.PickupDir != "/srv/pickup" || c.Outbound.MaxPayloadBytes != 2048 {
		t.Fatalf("GATEWAY_OUTBOUND_*: %v %+v", err, c)
	}
}
