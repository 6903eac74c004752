package outboundcheck

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
)

// Backdated makes s an outboundtest.Backdater for the conformance kit:
// SubmitAt submits, then setCreated writes the message's created straight
// to the store's table.
func Backdated(s outbound.Store, setCreated func(ctx context.Context, id string, created time.Time) error) outboundtest.Backdater {
	return backdated{Store: s, set: setCreated}
}

type backdated struct {
	outbound.Store
	set func(ctx context.Context, id string, created time.Time) error
}

func (b backdated) SubmitAt(ctx context.Context, created time.Time, m outbound.Message, payload io.Reader) (outbound.Message, bool, error) {
	got, ok, err := b.Submit(ctx, m, payload)
	if err != nil || !ok {
		return got, ok, err
	}
	if err := b.set(ctx, got.ID, created); err != nil {
		return got, ok, fmt.Errorf("outboundcheck: set created of %s: %w", got.ID, err)
	}
	got, err = b.Get(ctx, got.ID)
	return got, ok, err
}

// alternateAt is an Alternate whose first store is a Backdater.
type alternateAt struct {
	*alternate
	at outboundtest.Backdater
}

func (x alternateAt) SubmitAt(ctx context.Context, created time.Time, m outbound.Message, payload io.Reader) (outbound.Message, bool, error) {
	return x.at.SubmitAt(ctx, created, m, payload)
}
