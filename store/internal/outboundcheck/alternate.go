package outboundcheck

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbound/outboundtest"
)

// Alternate is one queue seen through two stores (two handles of one
// SQLite file, two pools on one PostgreSQL schema): each call goes to the
// next of them in turn, as the gateways (or processes) sharing a database
// would. Run the conformance kit against it. When a is an
// outboundtest.Backdater, so is the result (SubmitAt goes to a).
func Alternate(a, b outbound.Store) outbound.Store {
	x := &alternate{s: [2]outbound.Store{a, b}}
	if at, ok := a.(outboundtest.Backdater); ok {
		return alternateAt{alternate: x, at: at}
	}
	return x
}

type alternate struct {
	n atomic.Uint64
	s [2]outbound.Store
}

func (x *alternate) next() outbound.Store { return x.s[x.n.Add(1)%2] }

func (x *alternate) Submit(ctx context.Context, m outbound.Message, payload io.Reader) (outbound.Message, bool, error) {
	return x.next().Submit(ctx, m, payload)
}

func (x *alternate) OpenPayload(ctx context.Context, id string) (io.ReadCloser, error) {
	return x.next().OpenPayload(ctx, id)
}

func (x *alternate) Lease(ctx context.Context, limit int, lease time.Duration) ([]outbound.Message, error) {
	return x.next().Lease(ctx, limit, lease)
}

func (x *alternate) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	return x.next().Renew(ctx, id, token, lease)
}

func (x *alternate) Release(ctx context.Context, id, token string) error {
	return x.next().Release(ctx, id, token)
}

func (x *alternate) Posting(ctx context.Context, id, token, digest string) error {
	return x.next().Posting(ctx, id, token, digest)
}

func (x *alternate) Retry(ctx context.Context, id, token string, next time.Time, lastErr string) error {
	return x.next().Retry(ctx, id, token, next, lastErr)
}

func (x *alternate) Awaiting(ctx context.Context, id, token string, deadline time.Time) error {
	return x.next().Awaiting(ctx, id, token, deadline)
}

func (x *alternate) Delivered(ctx context.Context, id, token string, ev *outbound.Evidence) error {
	return x.next().Delivered(ctx, id, token, ev)
}

func (x *alternate) Failed(ctx context.Context, id, token, reason string, ev *outbound.Evidence) error {
	return x.next().Failed(ctx, id, token, reason, ev)
}

func (x *alternate) Settle(ctx context.Context, partner, messageID string, delivered bool, reason string,
	ev *outbound.Evidence) (outbound.Message, bool, error) {
	return x.next().Settle(ctx, partner, messageID, delivered, reason, ev)
}

func (x *alternate) Get(ctx context.Context, id string) (outbound.Message, error) {
	return x.next().Get(ctx, id)
}

func (x *alternate) FindByMessageID(ctx context.Context, partner, messageID string) (outbound.Message, error) {
	return x.next().FindByMessageID(ctx, partner, messageID)
}

func (x *alternate) List(ctx context.Context, f outbound.Filter) ([]outbound.Message, error) {
	return x.next().List(ctx, f)
}

func (x *alternate) Stats(ctx context.Context) ([]outbound.Stats, error) { return x.next().Stats(ctx) }

func (x *alternate) Cancel(ctx context.Context, id, reason string) error {
	return x.next().Cancel(ctx, id, reason)
}

func (x *alternate) Resend(ctx context.Context, id string) error { return x.next().Resend(ctx, id) }

func (x *alternate) Purge(ctx context.Context, before time.Time, limit int) (int, error) {
	return x.next().Purge(ctx, before, limit)
}

var _ outbound.Store = (*alternate)(nil)
