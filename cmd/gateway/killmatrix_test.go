package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/inbox"
)

// killMatrixMessages is the number of messages per store and handler.
const killMatrixMessages = 300

// TestKillMatrix sends killMatrixMessages AS2 messages (half EDIFACT
// interchanges, half plain text) through the real `gateway serve` process
// while it is killed with SIGKILL again and again: by its own fault
// injection at an exact phase (GATEWAY_FAULT_KILL: before the handler,
// during it — its work done, the accept not committed — and after the
// commit, before the reply), rotating through the phases at a random
// message count, and every fourth time from outside at a random moment.
// Every message is resent until it is answered positively. With the
// transactional table handler, on SQLite and PostgreSQL, every message must
// have exactly one row: 0 double side effects and 0 losses. The same kills
// with a plain handler (the dir handler plus a journal line per successful
// run, GATEWAY_FAULT_JOURNAL: a non-idempotent side effect) are measured
// and reported, not asserted.
func TestKillMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts the gateway dozens of times")
	}
	stores := []struct {
		name string
		url  func(t *testing.T, dir string) string
	}{
		{"sqlite", func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "gw.db") }},
		{"postgres", func(t *testing.T, dir string) string { return pgStoreURL(t) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			for _, handler := range []string{"table", "plain"} {
				t.Run(handler, func(t *testing.T) {
					dir := t.TempDir()
					r := runKillMatrix(t, dir, st.url(t, dir), handler, killMatrixMessages)
					t.Logf("KILL MATRIX %s/%s: %d messages, %d kills (before %d, during %d, after %d, random %d), %d sends; "+
						"handler effects: %d doubled, %d lost, %d extra; %s",
						st.name, handler, r.messages, r.kills(), r.byPhase["before"], r.byPhase["during"], r.byPhase["after"],
						r.byPhase["random"], r.sends.Load(), r.doubled, r.lost, r.extra, r.elapsed.Round(time.Millisecond))
					if handler == "table" && (r.doubled != 0 || r.lost != 0) {
						t.Errorf("transactional handler: %d messages with a double side effect, %d lost", r.doubled, r.lost)
					}
					for _, ph := range []string{"before", "during", "after"} {
						if r.byPhase[ph] == 0 {
							t.Errorf("no kill in phase %s", ph)
						}
					}
				})
			}
		})
	}
}

type killMatrixResult struct {
	messages      int
	byPhase       map[string]int
	sends         atomic.Int64
	doubled, lost int // messages whose effect happened more than once / never
	extra         int // effects beyond one per message
	elapsed       time.Duration
}

func (r *killMatrixResult) kills() int {
	n := 0
	for _, v := range r.byPhase {
		n += v
	}
	return n
}

func runKillMatrix(t *testing.T, dir, storeURL, handler string, count int) *killMatrixResult {
	start := time.Now()
	demo := filepath.Dir(demoConfig(t))
	addr := freePort(t)
	cfg := filepath.Join(dir, "gateway.yaml")
	handlerCfg := "  type: table\n"
	if handler == "plain" {
		handlerCfg = "  type: dir\n  inbox: inbox\n"
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: %s
store: %s
lease: 1s
partners: %s
identity:
  as2_id: GATEWAY
  keys:
    - cert: %s
      key: %s
handler:
%sshutdown_timeout: 1s
`, addr, storeURL, filepath.Join(demo, "partners"), filepath.Join(demo, "keys", "gateway.pem"),
		filepath.Join(demo, "keys", "gateway.key"), handlerCfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(dir, "journal")
	env := []string{}
	if handler == "plain" {
		env = append(env, "GATEWAY_FAULT_JOURNAL="+journal)
	}

	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	client := &as2client.Client{URL: "http://" + addr + "/as2", From: "DEMO", To: "GATEWAY",
		SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true}
	type message struct {
		id  string
		msg *as2client.Message
	}
	msgs := make([]message, count)
	bodies := map[string]bool{}
	for i := range msgs {
		body, ctype := fmt.Sprintf("kill matrix message %d", i), "text/plain"
		if i%2 == 0 {
			ref := fmt.Sprintf("KM%06d", i)
			body = "UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261201:1200+" + ref + "'UNH+1+INVOIC:D:96A:UN'BGM+380+" + ref + "+9'UNT+3+1'UNZ+1+" + ref + "'"
			ctype = "application/edifact"
		}
		m, err := client.Prepare([]byte(body), ctype, fmt.Sprintf("m%d.txt", i))
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = message{strings.Trim(m.ID, "<>"), m}
		bodies[body] = true
	}

	r := &killMatrixResult{messages: count, byPhase: map[string]int{}}
	// Senders: each message is resent until answered positively.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	work := make(chan int)
	var done atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				for {
					if ctx.Err() != nil {
						failed.Store(fmt.Sprintf("message %d not answered positively in time", i))
						return
					}
					r.sends.Add(1)
					sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
					res, err := client.Send(sctx, msgs[i].msg)
					scancel()
					if err == nil && res.Status == 200 && res.OK() {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				done.Add(1)
			}
		}()
	}
	go func() {
		defer close(work)
		for i := range msgs {
			select {
			case work <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	// Supervisor: run the gateway, let it be killed, restart it.
	phases := []string{"before", "during", "after"}
	for cycle := 0; ; cycle++ {
		var gwEnv []string
		random := cycle%4 == 3
		phase := phases[(cycle-cycle/4)%3]
		if !random {
			gwEnv = append(env, fmt.Sprintf("GATEWAY_FAULT_KILL=%s:%d", phase, 1+rand.IntN(15)))
		} else {
			gwEnv = env
		}
		cmd := startGateway(t, cfg, addr, gwEnv...)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var timer <-chan time.Time
		if random {
			timer = time.After(time.Duration(100+rand.IntN(900)) * time.Millisecond)
		}
		select {
		case <-allDone:
			cmd.Process.Kill()
			<-exited
			cycle = -1
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("gateway exited without a kill: %v (logs in %s)", err, dir)
			}
			if random {
				t.Fatalf("gateway died on its own in a random-kill cycle: %v", err)
			}
			r.byPhase[phase]++
		case <-timer:
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			r.byPhase["random"]++
		case <-ctx.Done():
			cmd.Process.Kill()
			<-exited
			t.Fatalf("kill matrix timed out: %d of %d messages answered (logs in %s)", done.Load(), count, dir)
		}
		if cycle < 0 {
			break
		}
	}
	if f, ok := failed.Load().(string); ok {
		t.Fatal(f)
	}

	// Effects per message: table rows by message id; journal lines by
	// payload idempotency key (one payload per message).
	var effects map[string]int
	if handler == "table" {
		effects = countTableRows(t, storeURL)
	} else {
		effects = countJournal(t, journal)
	}
	total := 0
	for _, n := range effects {
		total += n
		if n > 1 {
			r.doubled++
		}
	}
	if handler == "table" {
		for _, m := range msgs {
			if effects[m.id] == 0 {
				r.lost++
			}
		}
	} else {
		r.lost = count - len(effects)
		checkInboxFiles(t, filepath.Join(dir, "inbox"), bodies, count)
	}
	r.extra = total - (count - r.lost)
	r.elapsed = time.Since(start)
	return r
}

// countTableRows counts the table handler's rows per message id.
func countTableRows(t *testing.T, storeURL string) map[string]int {
	out := map[string]int{}
	ctx := context.Background()
	var query func(q string) ([]string, error)
	if path, ok := strings.CutPrefix(storeURL, "sqlite:"); ok {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		query = func(q string) ([]string, error) {
			rows, err := db.QueryContext(ctx, q)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var ids []string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return nil, err
				}
				ids = append(ids, id)
			}
			return ids, rows.Err()
		}
		ids, err := query(`SELECT message_id FROM ` + inbox.TableName)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			out[id]++
		}
		return out
	}
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("schema")
	q.Del("schema")
	q.Del("pool_max_conns") // a pool setting: pgx.Connect refuses it
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT message_id FROM `+pgx.Identifier{schema, inbox.TableName}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// countJournal counts the journal's lines per payload idempotency key.
func countJournal(t *testing.T, path string) map[string]int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() != "" {
			out[sc.Text()]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkInboxFiles checks what the dir handler left after the kills: one
// complete payload file per message (its content one of the bodies sent),
// each with its sidecar, and no temporary or other file: a kill at any
// point of a write leaves nothing half-written under a visible name.
func checkInboxFiles(t *testing.T, root string, bodies map[string]bool, count int) {
	t.Helper()
	partners, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	payloads, seen := 0, map[string]bool{}
	for _, pd := range partners {
		dir := filepath.Join(root, pd.Name())
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, e := range entries {
			names[e.Name()] = true
		}
		for _, e := range entries {
			n := e.Name()
			if strings.HasSuffix(n, inbox.SidecarSuffix) {
				if !names[strings.TrimSuffix(n, inbox.SidecarSuffix)] {
					// A kill between the sidecar's link and the payload's:
					// the resend links the payload next to it. The message
					// was answered positively, so it must be there.
					t.Errorf("%s: a sidecar without its payload", n)
				}
				continue
			}
			if strings.HasPrefix(n, ".") {
				t.Errorf("%s: a temporary file left in the inbox", n)
				continue
			}
			if !names[n+inbox.SidecarSuffix] {
				t.Errorf("%s: a payload without its sidecar", n)
			}
			b, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			if !bodies[string(b)] {
				t.Errorf("%s: %d bytes that are no message's whole body", n, len(b))
			}
			if seen[string(b)] {
				t.Errorf("%s: a second file for the same message", n)
			}
			seen[string(b)] = true
			payloads++
		}
	}
	if payloads != count {
		t.Errorf("%d payload files in the inbox for %d messages", payloads, count)
	}
}
