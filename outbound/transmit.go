package outbound

import (
	"context"
	"io"
	"time"
)

// Transmitter makes one attempt at sending a message with one protocol:
// it builds the message from the payload (signing, encryption, compression
// as the partner's sending settings say), calls posting with the
// transmission's digest right before the message leaves (the Sender records
// it with Store.Posting; an error from posting aborts the attempt before
// anything is sent), posts it and checks the answer.
//
// Implementations for AS2 and AS4 live with the wiring (internal/transmit);
// tests use their own.
type Transmitter interface {
	Transmit(ctx context.Context, m Message, open func() (io.ReadCloser, error), posting func(digest string) error) Attempt
}

// Outcome of one attempt.
type Outcome int

const (
	// Retry: nothing final was learnt (connection refused, timeout, 5xx,
	// an answer we could not read or verify): the message is due again on
	// the partner's schedule.
	Retry Outcome = iota + 1
	// Delivered: a positive MDN or receipt that verified and matched.
	Deliver
	// Refused: the partner refused the message for good (a negative MDN,
	// an ebMS error signal of severity failure, a 4xx other than 408/429):
	// Failed with the partner's reason; never retried.
	Refuse
	// Await: the partner took the message and its MDN comes
	// asynchronously; Attempt.AwaitFor says how long to wait for it.
	Await
)

// Attempt is what one transmission came to.
type Attempt struct {
	Outcome Outcome
	// Reason: why the attempt did not deliver (the partner's words for
	// Refuse, ours for Retry), short and fit for an operator.
	Reason string
	// Evidence is the MDN, receipt or error signal received, if any.
	Evidence *Evidence
	// Status is the HTTP status received (0: none); RetryAfter the
	// partner's Retry-After.
	Status     int
	RetryAfter time.Duration
	// AwaitFor is how long an asynchronous MDN is waited for (Await).
	AwaitFor time.Duration
}
