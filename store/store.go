// Package store opens the dedup store (and the audit sink kept beside it)
// named by the gateway's store URL:
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

	"gateway/audit"
	"gateway/dedup"
	"gateway/store/pgstore"
	"gateway/store/sqlitestore"
)

// Backend is a dedup store together with the audit sink of the same
// database. For the SQL backends the sink is durable: its Write fails when
// the record cannot be stored.
type Backend interface {
	dedup.Store
	AuditSink() audit.Sink
}

// Memory is the memory: backend. Its audit records stay in Audit.
type Memory struct {
	*dedup.MemoryStore
	Audit *audit.Memory
}

// AuditSink returns m.Audit.
func (m *Memory) AuditSink() audit.Sink { return m.Audit }

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
		return &Memory{MemoryStore: dedup.NewMemoryStore(opts), Audit: &audit.Memory{}}, nil
	case "sqlite":
		path := rest
		if strings.HasPrefix(path, "//") {
			path = path[2:]
		}
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
