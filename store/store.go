// Package store opens the backend (dedup store, business ledger, reply
// outbox, outbound queue and audit sink, all in one database) named by the
// gateway's store URL:
//
//	memory:                       in process memory; NOT durable (tests, demos)
//	sqlite:PATH                   SQLite database file PATH (created with its directory)
//	sqlite://PATH                 the same; sqlite:///var/lib/gw/dedup.db is an absolute path
//	postgres://USER@HOST/DB?…     PostgreSQL (also postgresql://); an optional
//	                              schema=NAME parameter picks the schema (default "gateway"),
//	                              every other parameter goes to pgx
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/store/pgstore"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// Backend is everything the gateway keeps in its database: the transport
// dedup store, the business interchange ledger, the outbox of replies to
// post (AS2 asynchronous MDNs), the outbound queue of messages to send and
// the audit sink. For the SQL backends all five share one database and the
// sink is durable: its Write fails when the record cannot be stored.
type Backend interface {
	dedup.Store
	dedup.Ledger
	Outbox() outbox.Store
	Outbound() outbound.Store
	AuditSink() audit.Sink
}

// Memory is the memory: backend: its dedup store is also its ledger, its
// queued replies stay in Queue, the messages to send in Outgoing and its
// audit records in Audit. None of it survives the process.
type Memory struct {
	*dedup.MemoryStore
	Queue    *outbox.Memory
	Outgoing *outbound.Memory
	Audit    *audit.Memory
}

// Outbox returns m.Queue.
func (m *Memory) Outbox() outbox.Store { return m.Queue }

// Outbound returns m.Outgoing.
func (m *Memory) Outbound() outbound.Store { return m.Outgoing }

// AuditSink returns m.Audit.
func (m *Memory) AuditSink() audit.Sink { return m.Audit }

var (
	_ Backend = (*Memory)(nil)
	_ Backend = (*sqlitestore.Store)(nil)
	_ Backend = (*pgstore.Store)(nil)
)

// ErrUnsupportedURL is returned for a store URL of no known form.
var ErrUnsupportedURL = errors.New("store: unsupported store URL (want memory:, sqlite:PATH or postgres://…)")

// Open opens the backend named by storeURL with the given lease settings.
// Errors reaching a database wrap dedup.ErrUnavailable. Error messages never
// repeat a password of the URL.
func Open(ctx context.Context, storeURL string, opts dedup.Options) (Backend, error) {
	scheme, rest, _ := strings.Cut(storeURL, ":")
	switch strings.ToLower(scheme) {
	case "memory":
		if rest != "" {
			return nil, fmt.Errorf("store: memory: takes no path: %w", ErrUnsupportedURL)
		}
		return &Memory{MemoryStore: dedup.NewMemoryStore(opts), Queue: outbox.NewMemory(), Outgoing: outbound.NewMemory(),
			Audit: &audit.Memory{}}, nil
	case "sqlite":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, fmt.Errorf("store: sqlite: needs a file path: %w", ErrUnsupportedURL)
		}
		return sqlitestore.Open(ctx, path, opts)
	case "postgres", "postgresql":
		dsn, schema, err := splitSchema(storeURL)
		if err != nil {
			return nil, err
		}
		var o []pgstore.Option
		if schema != "" {
			o = append(o, pgstore.WithSchema(schema))
		}
		return pgstore.Open(ctx, dsn, opts, o...)
	}
	if storeURL == "" {
		return nil, fmt.Errorf("store: no store URL: %w", ErrUnsupportedURL)
	}
	return nil, fmt.Errorf("store: scheme %q: %w", scheme, ErrUnsupportedURL)
}

// splitSchema removes the schema parameter from a PostgreSQL URL.
func splitSchema(storeURL string) (dsn, schema string, err error) {
	u, err := url.Parse(storeURL)
	if err != nil || u.Host == "" && u.Opaque != "" {
		// url's message quotes the URL, password included.
		return "", "", fmt.Errorf("store: postgres: malformed URL: %w", ErrUnsupportedURL)
	}
	q := u.Query()
	schema = q.Get("schema")
	if schema == "" && q.Has("schema") {
		return "", "", fmt.Errorf("store: postgres: empty schema parameter")
	}
	q.Del("schema")
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}
