package pgstore

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/store/internal/chunks"
)

//go:embed migrations/outbound/*.sql
var outboundMigrations embed.FS

// OutboundComponent is the name under which the outbound queue's migrations
// are recorded.
const OutboundComponent = "outbound"

// ChunkSize is the size of the rows a payload is stored in.
const ChunkSize = 256 << 10

// OrphanAge is how long a payload being written may go without a new chunk
// before PurgeOrphanPayloads (run now and then by Submit) removes it as the
// leftover of a crash.
const OrphanAge = time.Hour

// purgeEvery spaces the purges Submit runs.
const purgeEvery = 10 * time.Minute

const outboundColumns = `id, partner, protocol, message_id, idempotency_key, source, content_type, filename, subject,
	service, action, conversation_id, size, sha256, state, attempts, next_attempt, last_error, reason, sent, evidence,
	lease_token, leased_until, created, updated, properties`

// Outbound is the durable outbound.Store in the store's schema.
//
// A payload is written in chunks of ChunkSize, each by its own statement
// while the submission is read, then the message row is inserted and its
// upload marked done in one transaction: a message exists with its whole
// payload or not at all. A crash in between leaves chunks without a
// message, removed by PurgeOrphanPayloads.
//
// Submit makes a message due at once by the database clock, and leases run
// on that clock too; the due times given to Retry and Awaiting are the
// caller's. Lease locks the due messages with FOR UPDATE SKIP LOCKED, so
// the workers of a fleet each get other messages.
type Outbound struct {
	pool *pgxpool.Pool
	q    outboundQueries

	mu        sync.Mutex
	lastPurge time.Time
}

// Outbound returns the outbound queue of this database.
func (s *Store) Outbound() outbound.Store { return s.outbound }

// OutboundQueue returns the outbound queue with its maintenance methods.
func (s *Store) OutboundQueue() *Outbound { return s.outbound }

// Submit implements outbound.Store.
func (o *Outbound) Submit(ctx context.Context, m outbound.Message, payload io.Reader) (outbound.Message, bool, error) {
	return chunks.Submit(ctx, chunks.Steps{Store: "pgstore", ByKey: o.byKey, BeforeUpload: o.maybePurge,
		Write: o.writePayload, Drop: o.dropPayload, Commit: o.commitMessage, Get: o.Get}, m, payload)
}

// writePayload registers upload pid and writes r to its chunks, one
// statement per chunk.
func (o *Outbound) writePayload(ctx context.Context, pid string, r io.Reader) (int64, string, error) {
	if _, err := o.pool.Exec(ctx, o.q.upload, pid); err != nil {
		return 0, "", wrap("outbound upload", err)
	}
	h := sha256.New()
	buf := make([]byte, ChunkSize)
	var size int64
	for seq := 0; ; seq++ {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			size += int64(n)
			tag, err := o.pool.Exec(ctx, o.q.chunk, pid, seq, buf[:n])
			if err != nil {
				return 0, "", wrap("outbound chunk", err)
			}
			if tag.RowsAffected() != 1 {
				return 0, "", fmt.Errorf("pgstore: outbound chunk %d: upload %s was purged as an orphan", seq, pid)
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return 0, "", fmt.Errorf("reading the payload: %w", rerr)
		}
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

// commitMessage inserts the message row and ends its upload in one
// transaction; inserted is false when a unique index refused the row.
func (o *Outbound) commitMessage(ctx context.Context, m outbound.Message, pid string, size int64, sum string) (bool, error) {
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return false, wrap("outbound submit", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	tag, err := tx.Exec(ctx, o.q.uploadDone, pid)
	if err != nil {
		return false, wrap("outbound submit", err)
	}
	if tag.RowsAffected() != 1 {
		return false, fmt.Errorf("pgstore: outbound submit %s: upload %s was purged as an orphan", m.ID, pid)
	}
	props, err := outbound.EncodeProperties(m.Properties)
	if err != nil {
		return false, fmt.Errorf("pgstore: outbound submit %s: %w", m.ID, err)
	}
	tag, err = tx.Exec(ctx, o.q.insert, m.ID, m.Partner, string(m.Protocol), m.MessageID, m.IdempotencyKey,
		m.Source, m.ContentType, m.Filename, m.Subject, m.Service, m.Action, m.ConversationID, pid, size, sum, props)
	if err != nil {
		return false, wrap("outbound submit", err)
	}
	if tag.RowsAffected() != 1 {
		return false, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return false, wrap("outbound submit: commit", err)
	}
	return true, nil
}

// dropPayload removes the chunks of an upload that did not become a
// message. It runs even when ctx is cancelled; what it cannot remove is
// left to PurgeOrphanPayloads.
func (o *Outbound) dropPayload(ctx context.Context, pid string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := o.dropUpload(ctx, pid, false); err != nil {
		slog.Warn("outbound: removing the chunks of a payload not queued", "payload", pid, "err", err)
	}
}

// dropUpload ends upload pid and removes its chunks, unless a message was
// committed with them. A purge (orphan) removes the chunks only when it
// is the one that ended the upload: a Submit committing the message at the
// same time ends it in the message's transaction, and exactly one of the
// two does (the row lock of the upload orders them).
func (o *Outbound) dropUpload(ctx context.Context, pid string, orphan bool) (bool, error) {
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return false, wrap("outbound drop payload", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	tag, err := tx.Exec(ctx, o.q.uploadDone, pid)
	if err != nil {
		return false, wrap("outbound drop payload", err)
	}
	if orphan && tag.RowsAffected() != 1 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, o.q.dropChunks, pid); err != nil {
		return false, wrap("outbound drop payload", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, wrap("outbound drop payload", err)
	}
	return true, nil
}

// PurgeOrphanPayloads removes the chunks of payloads whose submission
// ended without a message (a crash mid-payload) and that had no chunk
// written for olderThan. It returns how many payloads it removed.
func (o *Outbound) PurgeOrphanPayloads(ctx context.Context, olderThan time.Duration) (int, error) {
	total := 0
	for {
		rows, err := o.pool.Query(ctx, o.q.orphans, ceilUS(olderThan))
		if err != nil {
			return total, wrap("outbound purge", err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return total, wrap("outbound purge", err)
		}
		if len(pids) == 0 {
			return total, nil
		}
		dropped := 0
		for _, pid := range pids {
			ok, err := o.dropUpload(ctx, pid, true)
			if err != nil {
				return total, err
			}
			if ok {
				dropped++
			}
		}
		total += dropped
		if dropped == 0 {
			return total, nil
		}
	}
}

// maybePurge runs PurgeOrphanPayloads at most every purgeEvery.
func (o *Outbound) maybePurge(ctx context.Context) {
	o.mu.Lock()
	due := time.Since(o.lastPurge) >= purgeEvery
	if due {
		o.lastPurge = time.Now()
	}
	o.mu.Unlock()
	if !due {
		return
	}
	if n, err := o.PurgeOrphanPayloads(ctx, OrphanAge); err != nil {
		slog.Warn("outbound: purging orphan payloads", "err", err)
	} else if n > 0 {
		slog.Info("outbound: purged orphan payloads", "payloads", n)
	}
}

// OpenPayload implements outbound.Store: the payload is read one chunk (one
// query) at a time.
func (o *Outbound) OpenPayload(ctx context.Context, id string) (io.ReadCloser, error) {
	var (
		pid  string
		size int64
	)
	err := o.pool.QueryRow(ctx, o.q.payload, id).Scan(&pid, &size)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: outbound payload of %s: %w", id, outbound.ErrNotFound)
	}
	if err != nil {
		return nil, wrap("outbound payload", err)
	}
	return chunks.NewReader(ctx, id, size, func(ctx context.Context, seq int) ([]byte, error) {
		var data []byte
		err := o.pool.QueryRow(ctx, o.q.readChunk, pid, seq).Scan(&data)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, io.EOF
		}
		if err != nil {
			return nil, wrap("outbound payload", err)
		}
		return data, nil
	}), nil
}
