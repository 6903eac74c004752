package sqlitestore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

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

const (
	obByIDSQL  = `SELECT ` + outboundColumns + ` FROM outbound_messages WHERE id = ?1`
	obByKeySQL = `SELECT ` + outboundColumns + ` FROM outbound_messages
WHERE partner = ?1 AND idempotency_key = ?2 AND idempotency_key <> ''`
	obByMessageIDSQL = `SELECT ` + outboundColumns + ` FROM outbound_messages WHERE partner = ?1 AND message_id = ?2`

	obUploadSQL = `INSERT INTO outbound_uploads (payload, started) VALUES (?1, ` + nowMS + `)`
	// A chunk is written only while its upload is still registered: a purge
	// that took the upload for an orphan makes the submission fail instead
	// of leaving a message with holes.
	obChunkSQL = `INSERT INTO outbound_chunks (payload, seq, data, written)
SELECT ?1, ?2, ?3, ` + nowMS + ` WHERE EXISTS (SELECT 1 FROM outbound_uploads WHERE payload = ?1)`
	obUploadDoneSQL = `DELETE FROM outbound_uploads WHERE payload = ?1`
	obDropChunksSQL = `DELETE FROM outbound_chunks
WHERE payload = ?1 AND NOT EXISTS (SELECT 1 FROM outbound_messages WHERE payload = ?1)`
	obReadChunkSQL = `SELECT data FROM outbound_chunks WHERE payload = ?1 AND seq = ?2`
	obPayloadSQL   = `SELECT payload, size FROM outbound_messages WHERE id = ?1`

	// The message's row: ON CONFLICT DO NOTHING covers every unique index,
	// so of concurrent submissions of one idempotency key one inserts and
	// the others find its message.
	obInsertSQL = `INSERT INTO outbound_messages (id, partner, protocol, message_id, idempotency_key, source,
	content_type, filename, subject, service, action, conversation_id, payload, size, sha256, state, attempts,
	next_attempt, created, updated, properties)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 'queued', 0, ` + nowMS + `,
	` + nowMS + `, ` + nowMS + `, ?16)
ON CONFLICT DO NOTHING`

	// An orphan: an upload with no chunk written for ?1 milliseconds.
	obOrphansSQL = `SELECT payload FROM outbound_uploads u
WHERE started < ` + nowMS + ` - ?1
	AND NOT EXISTS (SELECT 1 FROM outbound_chunks c WHERE c.payload = u.payload AND c.written >= ` + nowMS + ` - ?1)
LIMIT 100`
)

// Outbound is the durable outbound.Store in the store's database.
//
// A payload is written in chunks of ChunkSize, each in its own short
// transaction while the submission is read (the receiving side, which
// shares the database, waits for one chunk at most, never for a whole
// file), then the message row is inserted and its upload marked done in one
// transaction: a message exists with its whole payload or not at all. A
// crash in between leaves chunks without a message, removed by
// PurgeOrphanPayloads.
//
// Submit makes a message due at once by SQLite's clock, and leases run on
// that clock too; the due times given to Retry and Awaiting are the
// caller's.
type Outbound struct {
	db *sql.DB

	mu        sync.Mutex
	lastPurge time.Time
}

// Outbound returns the outbound queue of this database.
func (s *Store) Outbound() outbound.Store { return s.outbound }

// OutboundQueue returns the outbound queue with its maintenance methods.
func (s *Store) OutboundQueue() *Outbound { return s.outbound }

// Submit implements outbound.Store.
func (o *Outbound) Submit(ctx context.Context, m outbound.Message, payload io.Reader) (outbound.Message, bool, error) {
	return chunks.Submit(ctx, chunks.Steps{Store: "sqlitestore", ByKey: o.byKey, BeforeUpload: o.maybePurge,
		Write: o.writePayload, Drop: o.dropPayload, Commit: o.commitMessage, Get: o.Get}, m, payload)
}

// writePayload registers upload pid and writes r to its chunks, one
// statement (one short transaction) per chunk.
func (o *Outbound) writePayload(ctx context.Context, pid string, r io.Reader) (int64, string, error) {
	if _, err := o.db.ExecContext(ctx, obUploadSQL, pid); err != nil {
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
			res, err := o.db.ExecContext(ctx, obChunkSQL, pid, seq, buf[:n])
			if err != nil {
				return 0, "", wrap("outbound chunk", err)
			}
			if k, err := res.RowsAffected(); err != nil || k != 1 {
				return 0, "", fmt.Errorf("sqlitestore: outbound chunk %d: upload %s was purged as an orphan", seq, pid)
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
	tx, err := o.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return false, wrap("outbound submit", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, obUploadDoneSQL, pid)
	if err != nil {
		return false, wrap("outbound submit", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return false, fmt.Errorf("sqlitestore: outbound submit %s: upload %s was purged as an orphan", m.ID, pid)
	}
	props, err := outbound.EncodeProperties(m.Properties)
	if err != nil {
		return false, fmt.Errorf("sqlitestore: outbound submit %s: %w", m.ID, err)
	}
	res, err = tx.ExecContext(ctx, obInsertSQL, m.ID, m.Partner, string(m.Protocol), m.MessageID, m.IdempotencyKey,
		m.Source, m.ContentType, m.Filename, m.Subject, m.Service, m.Action, m.ConversationID, pid, size, sum, props)
	if err != nil {
		return false, wrap("outbound submit", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, wrap("outbound submit", err)
	}
	if n != 1 {
		return false, nil
	}
	if err := tx.Commit(); err != nil {
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
// two does.
func (o *Outbound) dropUpload(ctx context.Context, pid string, orphan bool) (bool, error) {
	tx, err := o.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return false, wrap("outbound drop payload", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, obUploadDoneSQL, pid)
	if err != nil {
		return false, wrap("outbound drop payload", err)
	}
	if n, err := res.RowsAffected(); err != nil || (orphan && n != 1) {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, obDropChunksSQL, pid); err != nil {
		return false, wrap("outbound drop payload", err)
	}
	if err := tx.Commit(); err != nil {
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
		rows, err := o.db.QueryContext(ctx, obOrphansSQL, ceilMS(olderThan))
		if err != nil {
			return total, wrap("outbound purge", err)
		}
		var pids []string
		for rows.Next() {
			var pid string
			if err := rows.Scan(&pid); err != nil {
				rows.Close()
				return total, wrap("outbound purge", err)
			}
			pids = append(pids, pid)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, wrap("outbound purge", err)
		}
		if len(pids) == 0 {
			return total, nil
		}
		for _, pid := range pids {
			dropped, err := o.dropUpload(ctx, pid, true)
			if err != nil {
				return total, err
			}
			if dropped {
				total++
			}
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
	err := o.db.QueryRowContext(ctx, obPayloadSQL, id).Scan(&pid, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlitestore: outbound payload of %s: %w", id, outbound.ErrNotFound)
	}
	if err != nil {
		return nil, wrap("outbound payload", err)
	}
	return chunks.NewReader(ctx, id, size, func(ctx context.Context, seq int) ([]byte, error) {
		var data []byte
		err := o.db.QueryRowContext(ctx, obReadChunkSQL, pid, seq).Scan(&data)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, io.EOF
		}
		if err != nil {
			return nil, wrap("outbound payload", err)
		}
		return data, nil
	}), nil
}
