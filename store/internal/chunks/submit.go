package chunks

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/edigateway/gateway/outbound"
)

// Steps are a SQL store's statements of an outbound submission, for Submit.
type Steps struct {
	// Store names the store in errors ("sqlitestore", "pgstore").
	Store string
	// ByKey returns the partner's message with an idempotency key
	// (outbound.ErrNotFound: none).
	ByKey func(ctx context.Context, partner, key string) (outbound.Message, error)
	// BeforeUpload runs before a new payload is written (the stores'
	// occasional purge of orphan uploads).
	BeforeUpload func(ctx context.Context)
	// Write registers upload pid and writes the payload to its chunks,
	// returning its size and SHA-256; Drop removes upload pid's chunks.
	Write func(ctx context.Context, pid string, r io.Reader) (size int64, sum string, err error)
	Drop  func(ctx context.Context, pid string)
	// Commit ends upload pid and inserts the message in one transaction;
	// false when a unique index (id, message id, idempotency key) refused it.
	Commit func(ctx context.Context, m outbound.Message, pid string, size int64, sum string) (bool, error)
	Get    func(ctx context.Context, id string) (outbound.Message, error)
}

// Submit is outbound.Store.Submit for a store whose payloads are chunk rows:
// a known idempotency key returns its message without reading the payload;
// otherwise the payload is written under a fresh upload id, then the
// message committed with it; a message the unique indexes refuse (a
// concurrent submission of the same key won) returns the winner and drops
// this upload's chunks.
func Submit(ctx context.Context, st Steps, m outbound.Message, payload io.Reader) (outbound.Message, bool, error) {
	switch {
	case m.ID == "" || m.Partner == "" || m.MessageID == "" || m.Protocol == "":
		return outbound.Message{}, false, errors.New(st.Store + ": outbound submit: id, partner, protocol and message id are required")
	case payload == nil:
		return outbound.Message{}, false, fmt.Errorf("%s: outbound submit %s: nil payload", st.Store, m.ID)
	}
	if m.IdempotencyKey != "" {
		got, err := st.ByKey(ctx, m.Partner, m.IdempotencyKey)
		if err == nil {
			return got, false, nil
		}
		if !errors.Is(err, outbound.ErrNotFound) {
			return outbound.Message{}, false, err
		}
	}
	st.BeforeUpload(ctx)
	pid := outbound.NewLeaseToken()
	size, sum, err := st.Write(ctx, pid, payload)
	if err != nil {
		st.Drop(ctx, pid)
		return outbound.Message{}, false, fmt.Errorf("%s: outbound submit %s: %w", st.Store, m.ID, err)
	}
	inserted, err := st.Commit(ctx, m, pid, size, sum)
	if err != nil || !inserted {
		st.Drop(ctx, pid)
	}
	if err != nil {
		return outbound.Message{}, false, err
	}
	if !inserted {
		if m.IdempotencyKey != "" {
			if got, err := st.ByKey(ctx, m.Partner, m.IdempotencyKey); err == nil {
				return got, false, nil
			}
		}
		return outbound.Message{}, false, fmt.Errorf("%s: outbound submit: message %s (or message id %s of %s) already exists",
			st.Store, m.ID, m.MessageID, m.Partner)
	}
	got, err := st.Get(ctx, m.ID)
	if err != nil {
		return outbound.Message{}, false, err
	}
	return got, true, nil
}
