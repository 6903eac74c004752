package config

import (
	"fmt"
	"time"
)

// Outbox configures the durable queue of async MDNs every gateway of a
// fleet sharing one database posts from.
type Outbox struct {
	// Lease is how long a gateway holds a delivery it is posting from the
	// others between two heartbeats: a killed gateway's deliveries are
	// posted by another one within it (default 30s).
	Lease time.Duration `mapstructure:"lease"`
	// Heartbeat is how often the lease of every delivery a gateway holds
	// is renewed while it holds it (default 0: a third of Lease), so that
	// a slow partner keeps the delivery with the gateway posting it.
	Heartbeat time.Duration `mapstructure:"heartbeat"`
}

// DefaultOutboxLease is outbox.lease's default.
const DefaultOutboxLease = 30 * time.Second

func init() {
	defaults["outbox.lease"] = DefaultOutboxLease
	defaults["outbox.heartbeat"] = time.Duration(0)
}

// HeartbeatInterval is Heartbeat, or a third of Lease when it is 0.
func (o Outbox) HeartbeatInterval() time.Duration {
	if o.Heartbeat > 0 {
		return o.Heartbeat
	}
	return o.Lease / 3
}

func (o Outbox) validate() []error {
	var errs []error
	if o.Lease < time.Second {
		errs = append(errs, fmt.Errorf("outbox.lease: %s is shorter than 1s", o.Lease))
	}
	if o.Heartbeat < 0 {
		errs = append(errs, fmt.Errorf("outbox.heartbeat: %s is negative", o.Heartbeat))
	} else if o.Heartbeat > 0 && o.Heartbeat >= o.Lease {
		errs = append(errs, fmt.Errorf("outbox.heartbeat: %s is not shorter than outbox.lease %s: leases would run out between renewals and another gateway post the same MDN", o.Heartbeat, o.Lease))
	}
	return errs
}
