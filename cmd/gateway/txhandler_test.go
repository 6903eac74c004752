package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"database/sql"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/pgtest"
	"github.com/edigateway/gateway/server"
	"github.com/edigateway/gateway/store/pgstore"
)

// pgStoreURL is a postgres:// store URL for a fresh test schema.
func pgStoreURL(t *testing.T) string {
	dsn, schema := pgtest.Schema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// tableRows counts the rows of the table handler per message id.
func tableRows(t *testing.T, s *server.Server) map[string]int {
	t.Helper()
	out := map[string]int{}
	var rows interface {
		Next() bool
		Scan(...any) error
		Close()
	}
	ctx := context.Background()
	switch b := s.Backend.(type) {
	case interface{ DB() *sql.DB }:
		r, err := b.DB().QueryContext(ctx, `SELECT message_id FROM `+inbox.TableName)
		if err != nil {
			t.Fatal(err)
		}
		rows = sqlRows{r}
	case *pgstore.Store:
		r, err := b.Pool().Query(ctx, `SELECT message_id FROM `+pgx.Identifier{b.Schema(), inbox.TableName}.Sanitize())
		if err != nil {
			t.Fatal(err)
		}
		rows = r
	default:
		t.Fatalf("backend %T", s.Backend)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id]++
	}
	return out
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// TestTableHandlerViaAS2AndAS4 runs the transactional "table" handler
// behind the real endpoints on SQLite and PostgreSQL: each message's
// payload is one row, and retransmissions on either protocol are answered
// without a second row.
func TestTableHandlerViaAS2AndAS4(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T, dir string) string
	}{
		{"sqlite", func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "gw.db") }},
		{"postgres", func(t *testing.T, dir string) string { return pgStoreURL(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			demo := filepath.Dir(demoConfig(t))
			cfg, err := config.Load(demoConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cfg.Store = tc.store(t, dir)
			cfg.Handler.Type, cfg.Handler.Inbox = "table", ""
			cfg.Audit.File = ""
			s, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()

			partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
			gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
			c := &as2client.Client{URL: srv.URL + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key,
				SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true}
			msg, err := c.Prepare([]byte("order 4711, as2"), "text/plain", "order.txt")
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"processed", "duplicate-document"} {
				res, err := c.Send(context.Background(), msg)
				if err != nil || !res.OK() || !strings.Contains(res.MDN.Disposition.String(), want) {
					t.Fatalf("AS2 send %d: %v %+v", i+1, err, res)
				}
			}

			payload := filepath.Join(t.TempDir(), "order.txt")
			os.WriteFile(payload, []byte("order 4712, as4"), 0o600)
			for i := range 2 {
				var out, errb bytes.Buffer
				code := run([]string{"send-as4", "-url", srv.URL + "/as4",
					"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
					"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
					"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
					"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
					"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", "as4-table@demo", payload}, &out, &errb)
				if code != 0 || !strings.Contains(out.String(), "signature valid") {
					t.Fatalf("AS4 send %d: exit %d: %s %s", i+1, code, out.String(), errb.String())
				}
			}
			rows := tableRows(t, s)
			if len(rows) != 2 || rows["as4-table@demo"] != 1 {
				t.Fatalf("table rows per message id: %v", rows)
			}
			for id, n := range rows {
				if n != 1 {
					t.Errorf("message %s: %d rows", id, n)
				}
			}
		})
	}
}

// A transactional handler needs a SQL store: the memory store fails at
// start, with the table handler configured or one set by an embedding
// program.
func TestTableHandlerRefusedOnMemoryStore(t *testing.T) {
	cfg, err := config.Load(demoConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Audit.File = "memory:", ""
	cfg.Handler.Type = "table"
	if _, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "needs a SQL store") {
		t.Fatalf("table handler on memory: %v", err)
	}
	cfg.Handler.Type, cfg.Handler.Inbox = "dir", t.TempDir()
	s, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetTxHandler(&inbox.Table{}); err == nil || !strings.Contains(err.Error(), "needs a SQL store") {
		t.Fatalf("SetTxHandler on memory: %v", err)
	}
}
