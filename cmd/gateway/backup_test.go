package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/edigateway/gateway/config"
)

// TestSQLiteBackupWhileServing takes a VACUUM INTO copy of the SQLite
// store while the gateway is serving traffic (the README's backup
// recipe), then starts a gateway on the copy: a message accepted before
// the backup is answered as a duplicate there.
func TestSQLiteBackupWhileServing(t *testing.T) {
	g := startLive(t, nil)
	c := g.as2Client(t, "DEMO", "")
	first, err := c.Prepare([]byte("first invoice"), "text/plain", "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if res := postAS2(t, c, first); !res.OK() || res.MDN.Disposition.IsWarning() {
		t.Fatalf("first: %+v", res)
	}
	dbFile := strings.TrimPrefix(g.cfg.Store, "sqlite:")
	backup := filepath.Join(t.TempDir(), "backup.db")

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // traffic during the backup
		defer wg.Done()
		for i := 0; i < 10; i++ {
			m, err := c.Prepare([]byte("more "+strings.Repeat("x", i)), "text/plain", "b.txt")
			if err != nil {
				t.Error(err)
				return
			}
			if res, err := c.Send(context.Background(), m); err != nil || !res.OK() {
				t.Errorf("during the backup: %v %+v", err, res)
			}
		}
	}()
	db, err := sql.Open("sqlite", "file:"+dbFile+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`VACUUM INTO ?`, backup); err != nil {
		t.Fatalf("VACUUM INTO while serving: %v", err)
	}
	db.Close()
	wg.Wait()

	restored := startLive(t, func(cfg *config.Config) { cfg.Store = "sqlite:" + backup })
	c2 := restored.as2Client(t, "DEMO", "")
	if res := postAS2(t, c2, first); !res.OK() || !res.MDN.Disposition.IsWarning() {
		t.Fatalf("resend to the restored copy: want the duplicate MDN, got %+v", res)
	}
}
