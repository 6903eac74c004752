package outboundtest

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/edigateway/gateway/outbound"
)

// Backdater is what a store under test implements (usually a wrapper in
// the store's own tests, writing to its tables) for the checks that need
// many messages created in the same instant, as a bulk of submissions
// within one millisecond (or Resends) makes them: Submit sets Created to
// the store's now, which the kit cannot set. Those checks are skipped for a
// store that is not a Backdater.
type Backdater interface {
	outbound.Store
	// SubmitAt is Submit as if the store's clock read created (a time the
	// store keeps exactly: whole milliseconds): the stored message's
	// Created is created.
	SubmitAt(ctx context.Context, created time.Time, m outbound.Message, payload io.Reader) (outbound.Message, bool, error)
}

// ClockedMemory is an outbound.Memory that is a Backdater: SubmitAt sets its
// clock for the Submit. For the kit's own tests and for tests of wrappers of
// Memory (embed it to keep SubmitAt).
type ClockedMemory struct {
	*outbound.Memory
	submitting sync.Mutex // held by SubmitAt: one clock setting at a time
	clock      sync.Mutex // guards at
	at         time.Time  // the clock while set; zero: time.Now
}

// NewMemory returns an empty ClockedMemory.
func NewMemory() *ClockedMemory {
	c := &ClockedMemory{}
	c.Memory = outbound.NewMemory(outbound.MemoryClock(c.now))
	return c
}

func (c *ClockedMemory) now() time.Time {
	c.clock.Lock()
	defer c.clock.Unlock()
	if c.at.IsZero() {
		return time.Now()
	}
	return c.at
}

func (c *ClockedMemory) setClock(at time.Time) {
	c.clock.Lock()
	c.at = at
	c.clock.Unlock()
}

// SubmitAt implements Backdater.
func (c *ClockedMemory) SubmitAt(ctx context.Context, created time.Time, m outbound.Message, payload io.Reader) (outbound.Message, bool, error) {
	c.submitting.Lock()
	defer c.submitting.Unlock()
	c.setClock(created)
	defer c.setClock(time.Time{})
	got, ok, err := c.Memory.Submit(ctx, m, payload)
	if err != nil {
		return got, ok, fmt.Errorf("outboundtest: submit at %s: %w", created, err)
	}
	return got, ok, nil
}
