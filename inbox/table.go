package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edigateway/gateway/exchange"
)

// TableName is the table the "table" handler writes, in the gateway's own
// database (in the store's schema on PostgreSQL).
const TableName = "inbox_payloads"

// Table is the built-in "table" handler, an exchange.TxHandler: one row per
// payload (metadata, idempotency keys and the bytes) in TableName, inserted
// in the transaction that accepts the message, so that the rows exist iff
// the message was accepted, however the gateway stops. Applications read
// the table (or a trigger on it moves the data on). Make it with OpenTable.
type Table struct {
	pgTable string // schema-qualified, for PostgreSQL
	// The database the table was opened in, for reading rows back.
	db   *sql.DB
	pool *pgxpool.Pool
}

const sqliteTableDDL = `CREATE TABLE IF NOT EXISTS ` + TableName + ` (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	idempotency_key TEXT    NOT NULL,
	message_key     TEXT    NOT NULL,
	partner         TEXT    NOT NULL,
	protocol        TEXT    NOT NULL,
	message_id      TEXT    NOT NULL,
	position        INTEGER NOT NULL,
	content_type    TEXT    NOT NULL,
	filename        TEXT    NOT NULL,
	sha256          TEXT    NOT NULL,
	size            INTEGER NOT NULL,
	body            BLOB    NOT NULL,
	received_at     INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS ` + TableName + `_key ON ` + TableName + ` (idempotency_key)`

const pgTableDDL = ` (
	id              bigserial   PRIMARY KEY,
	idempotency_key text        NOT NULL,
	message_key     text        NOT NULL,
	partner         text        NOT NULL,
	protocol        text        NOT NULL,
	message_id      text        NOT NULL,
	position        integer     NOT NULL,
	content_type    text        NOT NULL,
	filename        text        NOT NULL,
	sha256          text        NOT NULL,
	size            bigint      NOT NULL,
	body            bytea       NOT NULL,
	received_at     timestamptz NOT NULL)`

// OpenTable creates TableName if needed in the database of store, which
// must be a SQL store (a *sqlitestore.Store or *pgstore.Store: anything
// with DB() *sql.DB, or Pool() *pgxpool.Pool and Schema() string).
func OpenTable(ctx context.Context, store any) (*Table, error) {
	switch s := store.(type) {
	case interface{ DB() *sql.DB }:
		if _, err := s.DB().ExecContext(ctx, sqliteTableDDL); err != nil {
			return nil, fmt.Errorf("inbox: create table %s: %w", TableName, err)
		}
		return &Table{db: s.DB()}, nil
	case interface {
		Pool() *pgxpool.Pool
		Schema() string
	}:
		t := pgx.Identifier{s.Schema(), TableName}.Sanitize()
		err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			// Gateways of a fleet starting together create it once.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "inbox:"+t); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t+pgTableDDL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+pgx.Identifier{TableName + "_key"}.Sanitize()+` ON `+t+` (idempotency_key)`)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("inbox: create table %s: %w", t, err)
		}
		return &Table{pgTable: t, pool: s.Pool()}, nil
	}
	return nil, fmt.Errorf("inbox: the table handler needs a SQL store (sqlite: or postgres://), not %T", store)
}

// HandleTx implements exchange.TxHandler.
func (t *Table) HandleTx(ctx context.Context, tx exchange.Tx, m *exchange.Message) error {
	for i, p := range m.Payloads {
		body, err := readPayload(p)
		if err != nil {
			return fmt.Errorf("inbox: table: payload %d of %s from %s: %w", i+1, m.MessageID, m.Partner, err)
		}
		args := []any{p.IdempotencyKey, m.IdempotencyKey, m.Partner, string(m.Protocol), m.MessageID, i + 1,
			p.ContentType, p.Filename, p.SHA256, int64(len(body)), body}
		switch {
		case tx.SQLTx() != nil:
			_, err = tx.SQLTx().ExecContext(ctx, `INSERT INTO `+TableName+` (idempotency_key, message_key, partner, protocol,
	message_id, position, content_type, filename, sha256, size, body, received_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, append(args, m.Received.UnixMicro())...)
		case tx.PgxTx() != nil && t.pgTable != "":
			_, err = tx.PgxTx().Exec(ctx, `INSERT INTO `+t.pgTable+` (idempotency_key, message_key, partner, protocol,
	message_id, position, content_type, filename, sha256, size, body, received_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`, append(args, m.Received)...)
		default:
			err = errors.New("the transaction is not of the database the table was opened in")
		}
		if err != nil {
			return fmt.Errorf("inbox: table: payload %d of %s from %s: %w", i+1, m.MessageID, m.Partner, err)
		}
	}
	return nil
}

// readPayload reads a payload, whose size the protocol already bounded.
func readPayload(p exchange.Payload) ([]byte, error) {
	r, err := p.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

var _ exchange.TxHandler = (*Table)(nil)

// TableRow is a row of TableName without its body.
type TableRow struct {
	ID          int64
	Position    int
	ContentType string
	Filename    string
	SHA256      string
	Size        int64
}

// Rows lists the rows written for a message (its Message.IdempotencyKey,
// the transport key), in payload order, without bodies.
func (t *Table) Rows(ctx context.Context, messageKey string) ([]TableRow, error) {
	const cols = `id, position, content_type, filename, sha256, size`
	var out []TableRow
	switch {
	case t.db != nil:
		rows, err := t.db.QueryContext(ctx, `SELECT `+cols+` FROM `+TableName+` WHERE message_key = ? ORDER BY position, id`, messageKey)
		if err != nil {
			return nil, fmt.Errorf("inbox: table rows: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r TableRow
			if err := rows.Scan(&r.ID, &r.Position, &r.ContentType, &r.Filename, &r.SHA256, &r.Size); err != nil {
				return nil, fmt.Errorf("inbox: table rows: %w", err)
			}
			out = append(out, r)
		}
		return out, rows.Err()
	case t.pool != nil:
		rows, err := t.pool.Query(ctx, `SELECT `+cols+` FROM `+t.pgTable+` WHERE message_key = $1 ORDER BY position, id`, messageKey)
		if err != nil {
			return nil, fmt.Errorf("inbox: table rows: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r TableRow
			if err := rows.Scan(&r.ID, &r.Position, &r.ContentType, &r.Filename, &r.SHA256, &r.Size); err != nil {
				return nil, fmt.Errorf("inbox: table rows: %w", err)
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
	return nil, errors.New("inbox: table rows: the table was not opened")
}

// Body returns the bytes of row id of a message (sql.ErrNoRows or
// pgx.ErrNoRows wrapped when there is none for that message).
func (t *Table) Body(ctx context.Context, messageKey string, id int64) ([]byte, error) {
	var b []byte
	var err error
	switch {
	case t.db != nil:
		err = t.db.QueryRowContext(ctx, `SELECT body FROM `+TableName+` WHERE message_key = ? AND id = ?`, messageKey, id).Scan(&b)
	case t.pool != nil:
		err = t.pool.QueryRow(ctx, `SELECT body FROM `+t.pgTable+` WHERE message_key = $1 AND id = $2`, messageKey, id).Scan(&b)
	default:
		err = errors.New("the table was not opened")
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: table body: %w", err)
	}
	return b, nil
}
