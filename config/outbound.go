package config

import (
	"fmt"
	"time"
)

// Outbound configures the sending side: the workers of the durable queue
// of messages to partners, the submission API's payload limit and the
// pickup directories.
type Outbound struct {
	// PickupDir is the root of the pickup directories: one directory per
	// partner that sends (<pickup_dir>/<partner>/, with as2/ and as4/ for
	// a partner that sends with both); a file renamed into it is queued.
	// Empty: no pickup.
	PickupDir string `mapstructure:"pickup_dir"`
	// PickupInterval is how often the pickup directories are scanned
	// again (file events can be lost) and how often the outcome of the
	// files queued from them is looked up (default 2s).
	PickupInterval time.Duration `mapstructure:"pickup_interval"`
	// Workers is how many messages one gateway sends at the same time
	// (default 4).
	Workers int `mapstructure:"workers"`
	// Lease is how long a gateway holds a message it is sending from the
	// others between two heartbeats: a killed gateway's messages are sent
	// by another one after it (default 30s).
	Lease time.Duration `mapstructure:"lease"`
	// Heartbeat is how often the lease of a message being sent is renewed
	// (default 0: a third of Lease).
	Heartbeat time.Duration `mapstructure:"heartbeat"`
	// MaxPayloadBytes bounds one submitted payload (default 1 GiB); a
	// larger submission is refused (HTTP 413) and nothing is queued.
	MaxPayloadBytes int64 `mapstructure:"max_payload_bytes"`
	// Retention is how long a message in a final state (delivered,
	// failed, cancelled) is kept, with its payload and its MDN or receipt,
	// after its last change: the purge run every purge_interval deletes it
	// then (default 90 days; 0: kept forever, warned at start). Queued
	// and awaiting messages are never purged.
	Retention time.Duration `mapstructure:"retention"`
}

// Defaults of the outbound.* keys.
const (
	DefaultOutboundPickupInterval  = 2 * time.Second
	DefaultOutboundWorkers         = 4
	DefaultOutboundLease           = 30 * time.Second
	DefaultOutboundMaxPayloadBytes = int64(1 << 30)
	DefaultOutboundRetention       = 90 * 24 * time.Hour
)

func init() {
	defaults["outbound.pickup_dir"] = ""
	defaults["outbound.pickup_interval"] = DefaultOutboundPickupInterval
	defaults["outbound.workers"] = DefaultOutboundWorkers
	defaults["outbound.lease"] = DefaultOutboundLease
	defaults["outbound.heartbeat"] = time.Duration(0)
	defaults["outbound.max_payload_bytes"] = DefaultOutboundMaxPayloadBytes
	defaults["outbound.retention"] = DefaultOutboundRetention
}

// HeartbeatInterval is Heartbeat, or a third of Lease when it is 0.
func (o Outbound) HeartbeatInterval() time.Duration {
	if o.Heartbeat > 0 {
		return o.Heartbeat
	}
	return o.Lease / 3
}

func (o Outbound) validate() []error {
	var errs []error
	if o.PickupInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("outbound.pickup_interval: %s is shorter than 100ms", o.PickupInterval))
	}
	if o.Workers < 1 || o.Workers > 1024 {
		errs = append(errs, fmt.Errorf("outbound.workers: %d is not between 1 and 1024", o.Workers))
	}
	if o.Lease < time.Second {
		errs = append(errs, fmt.Errorf("outbound.lease: %s is shorter than 1s", o.Lease))
	}
	if o.Heartbeat < 0 {
		errs = append(errs, fmt.Errorf("outbound.heartbeat: %s is negative", o.Heartbeat))
	} else if o.Heartbeat > 0 && o.Heartbeat >= o.Lease {
		errs = append(errs, fmt.Errorf("outbound.heartbeat: %s is not shorter than outbound.lease %s: leases would run out between renewals and another gateway send the same message at the same time", o.Heartbeat, o.Lease))
	}
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("outbound.retention: %s is negative (0 keeps final messages forever)", o.Retention))
	}
	if o.MaxPayloadBytes < 1 {
		errs = append(errs, fmt.Errorf("outbound.max_payload_bytes: %d is not positive", o.MaxPayloadBytes))
	}
	return errs
}
