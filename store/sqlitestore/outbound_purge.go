package sqlitestore

import (
	"context"
	"time"
)

// purgeBatch bounds the messages one purge transaction deletes, and
// purgeChunks the payload chunks (of ChunkSize) one transaction deletes:
// the database's writer is never held for a whole payload.
const (
	purgeBatch  = 100
	purgeChunks = 32
)

const (
	// obPurgeSQL deletes the oldest final messages updated before ?1 (from
	// outbound_messages_final_updated) and returns their payloads.
	obPurgeSQL = `DELETE FROM outbound_messages WHERE id IN (
	SELECT id FROM outbound_messages
	WHERE state IN ('delivered', 'failed', 'cancelled') AND updated < ?1
	ORDER BY updated, id LIMIT ?2)
RETURNING payload, size`
	// A purged message's payload whose chunks are left is registered as an upload started
	// at 0 in the same transaction: should the process die before its
	// chunks are gone, PurgeOrphanPayloads removes them.
	obPurgeTombstoneSQL = `INSERT INTO outbound_uploads (payload, started) VALUES (?1, 0) ON CONFLICT DO NOTHING`
	obPurgeAllChunksSQL = `DELETE FROM outbound_chunks WHERE payload = ?1`
	obPurgeChunksSQL    = `DELETE FROM outbound_chunks WHERE payload = ?1 AND seq IN (
	SELECT seq FROM outbound_chunks WHERE payload = ?1 ORDER BY seq LIMIT ?2)`
)

// Purge implements outbound.Store: up to limit final messages last updated
// before before are deleted, at most purgeBatch per transaction with the
// chunks of their payloads up to purgeChunks in all; the chunks of the
// other payloads are deleted afterwards, purgeChunks per transaction.
func (o *Outbound) Purge(ctx context.Context, before time.Time, limit int) (int, error) {
	bound := unixMSCeil(before)
	total := 0
	for total < limit {
		n := min(limit-total, purgeBatch)
		deleted, large, err := o.purgeMessages(ctx, bound, n)
		if err != nil {
			return total, err
		}
		total += deleted
		for _, pid := range large {
			if err := o.purgePayload(ctx, pid); err != nil {
				return total, err
			}
		}
		if deleted < n {
			break
		}
	}
	return total, nil
}

// purgeMessages deletes up to n messages in one transaction, with the
// chunks of their payloads as long as they add up to at most purgeChunks
// (many small payloads: one transaction for the batch); it returns
// the larger payloads, registered for PurgeOrphanPayloads, whose chunks
// the caller deletes a few at a time.
func (o *Outbound) purgeMessages(ctx context.Context, bound int64, n int) (int, []string, error) {
	tx, err := o.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return 0, nil, wrap("outbound purge", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, obPurgeSQL, bound, n)
	if err != nil {
		return 0, nil, wrap("outbound purge", err)
	}
	var small, large []string
	budget := int64(purgeChunks)
	for rows.Next() {
		var pid string
		var size int64
		if err := rows.Scan(&pid, &size); err != nil {
			rows.Close()
			return 0, nil, wrap("outbound purge", err)
		}
		if c := (size + ChunkSize - 1) / ChunkSize; c <= budget {
			small, budget = append(small, pid), budget-c
		} else {
			large = append(large, pid)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, wrap("outbound purge", err)
	}
	for _, pid := range small {
		if _, err := tx.ExecContext(ctx, obPurgeAllChunksSQL, pid); err != nil {
			return 0, nil, wrap("outbound purge", err)
		}
	}
	for _, pid := range large {
		if _, err := tx.ExecContext(ctx, obPurgeTombstoneSQL, pid); err != nil {
			return 0, nil, wrap("outbound purge", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, nil, wrap("outbound purge", err)
	}
	return len(small) + len(large), large, nil
}

// purgePayload deletes a purged message's chunks a few at a time, then its
// tombstone.
func (o *Outbound) purgePayload(ctx context.Context, pid string) error {
	for {
		n, err := o.exec(ctx, "purge payload", obPurgeChunksSQL, pid, purgeChunks)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	_, err := o.dropUpload(ctx, pid, false)
	return err
}
