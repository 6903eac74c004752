package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/submitapi"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/server"
)

// The two-gateway test: the real binary twice, A (AS2 id GATEWAY, SQLite)
// and B (AS2 id DEMO, PostgreSQL in its own schema), each the other's
// partner, sending to each other over AS2 and AS4, plus a gateway embedded
// in the test process (A's identity, its own SQLite store) sending to B
// with Server.Submit.

const twoGWToken = "two-gateways-admin-token-0123456789abcdef"

// tgGateway is one gateway of the test: its addresses and directories.
type tgGateway struct {
	name                string
	dir, addr, admin    string
	inbox, audit, pick  string
	partnerID           string // the id the gateway gives its partner
	partnerCert         *x509.Certificate
	sendsTo, receivesAs string // AS2 ids: the partner's and our own
}

// tgWant is one submission the test made: where it went and its payload.
type tgWant struct {
	from, way string
	proto     outbound.Protocol
	name      string
	sha       string
}

func (w tgWant) String() string {
	return fmt.Sprintf("%s %s %s %s", w.from, w.way, w.proto, w.name)
}

func tgCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tgCopy(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tgPartnerYAML is the partner file for a partner with AS2 id as2ID and
// AS4 party party at addr; mdn is its as2.send.mdn.
func tgPartnerYAML(id, as2ID, party, cert, addr, mdn string) string {
	return fmt.Sprintf(`id: %[1]s
as2:
  as2_id: %[2]s
  certificates: [%[4]s]
  async_mdn_urls: ["http://%[5]s/as2"]
  async_mdn_private_networks: ["127.0.0.0/8"]
  send: {url: "http://%[5]s/as2", mdn: %[6]s, retry: {first: 1s, max: 2s}}
as4:
  party_id: %[3]s
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [%[4]s]
  pmodes: [{id: inv, service: "urn:demo:invoicing", action: Deliver}]
  send: {url: "http://%[5]s/as4", pmode: {id: inv}, retry: {first: 1s, max: 2s}}
`, id, as2ID, party, cert, addr, mdn)
}

// tgSetUp writes the configurations of A and B and starts both binaries.
func tgSetUp(t *testing.T) (a, b *tgGateway, fixture string) {
	t.Helper()
	fixture = filepath.Dir(demoConfig(t))
	gwPem := filepath.Join(fixture, "keys", "gateway.pem")
	demoPem, demoKey := filepath.Join(fixture, "partners", "demo-partner.pem"), filepath.Join(fixture, "keys", "demo-partner.key")
	root := t.TempDir()
	a = &tgGateway{name: "A", dir: filepath.Join(root, "a"), addr: freePort(t), admin: freePort(t), partnerID: "b",
		partnerCert: tgCert(t, demoPem), sendsTo: "DEMO", receivesAs: "GATEWAY"}
	b = &tgGateway{name: "B", dir: filepath.Join(root, "b"), addr: freePort(t), admin: freePort(t), partnerID: "a",
		partnerCert: tgCert(t, gwPem), sendsTo: "GATEWAY", receivesAs: "DEMO"}
	for _, g := range []*tgGateway{a, b} {
		g.inbox, g.audit, g.pick = filepath.Join(g.dir, "inbox"), filepath.Join(g.dir, "audit.jsonl"), filepath.Join(g.dir, "pickup")
		if err := os.MkdirAll(filepath.Join(g.dir, "partners"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rest := func(g *tgGateway) string {
		return fmt.Sprintf("handler: {type: dir, inbox: %s}\naudit: {file: %s}\noutbound: {pickup_dir: %s, pickup_interval: 200ms}\nshutdown_timeout: 2s\n",
			g.inbox, g.audit, g.pick)
	}
	// A: SQLite, partner b (DEMO) with a synchronous signed MDN.
	tgCopy(t, demoPem, filepath.Join(a.dir, "partners", "demo-partner.pem"))
	os.WriteFile(filepath.Join(a.dir, "partners", "b.yaml"),
		[]byte(tgPartnerYAML("b", "DEMO", "urn:demo:partner", "demo-partner.pem", b.addr, "sync")), 0o600)
	os.WriteFile(filepath.Join(a.dir, "gateway.yaml"),
		gatewayYAML(t, a.addr, "sqlite:"+filepath.Join(a.dir, "gw.db"), filepath.Join(a.dir, "partners"), rest(a)), 0o600)
	// B: PostgreSQL, partner a (GATEWAY) that gets an asynchronous MDN.
	tgCopy(t, gwPem, filepath.Join(b.dir, "partners", "gateway.pem"))
	os.WriteFile(filepath.Join(b.dir, "partners", "a.yaml"),
		[]byte(tgPartnerYAML("a", "GATEWAY", "urn:demo:gateway", "gateway.pem", a.addr, "async")), 0o600)
	os.WriteFile(filepath.Join(b.dir, "gateway.yaml"), fmt.Appendf(nil, `listen: %s
store: %s
partners: %s
identity:
  as2_id: DEMO
  party_id: urn:demo:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys: [{cert: %s, key: %s}]
%s`, b.addr, pgStoreURL(t), filepath.Join(b.dir, "partners"), demoPem, demoKey, rest(b)), 0o600)
	for _, g := range []*tgGateway{a, b} {
		startGatewayBinary(t, os.Args[0], filepath.Join(g.dir, "gateway.yaml"), g.addr,
			"GATEWAY_ADMIN_LISTEN="+g.admin, "GATEWAY_ADMIN_TOKEN="+twoGWToken)
	}
	return a, b, fixture
}

// tgPayload is a valid EDIFACT interchange from one AS2 id to another with
// a reference of its own (the receiver takes two interchanges with one
// reference for business duplicates).
func tgPayload(from, to, ref string) []byte {
	return fmt.Appendf(nil, "UNA:+.? 'UNB+UNOA:2+%s:14+%s:14+261204:2200+%s'UNH+1+INVOIC:D:96A:UN'BGM+380+%s+9'DTM+137:20261204:102'UNT+4+1'UNZ+1+%s'",
		from, to, ref, ref, ref)
}

func tgSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// tgDo calls the admin API of a gateway with the bearer token.
func tgDo(method, u string, hdr map[string]string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+twoGWToken)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// tgAPI is tgDo for the test's goroutine: an error ends the test.
func tgAPI(t *testing.T, method, u string, hdr map[string]string, body []byte) (int, []byte) {
	t.Helper()
	code, b, err := tgDo(method, u, hdr, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}

// tgSubmitHTTP submits one payload through the HTTP API twice under one
// Idempotency-Key: 202 then 200 replayed, the same message.
func tgSubmitHTTP(g *tgGateway, proto outbound.Protocol, key, name string, payload []byte) error {
	u := fmt.Sprintf("http://%s/api/v1/outbound/messages?partner=%s&protocol=%s&filename=%s", g.admin, g.partnerID, proto, name)
	hdr := map[string]string{"Idempotency-Key": key, "Content-Type": "application/edifact"}
	var ids []string
	for i, want := range []int{http.StatusAccepted, http.StatusOK} {
		code, body, err := tgDo(http.MethodPost, u, hdr, payload)
		var s submitapi.Submitted
		if err != nil || code != want || json.Unmarshal(body, &s) != nil || s.ID == "" {
			return fmt.Errorf("%s: POST %d: %d %s %v (want %d)", name, i+1, code, body, err, want)
		}
		ids = append(ids, s.ID)
	}
	if ids[0] != ids[1] {
		return fmt.Errorf("%s: the key queued two messages: %v", name, ids)
	}
	return nil
}

// tgDrop writes a file into a pickup directory as the docs say: under a
// temporary name, then renamed into place.
func tgDrop(g *tgGateway, proto outbound.Protocol, name string, payload []byte) error {
	dir := filepath.Join(g.pick, g.partnerID, string(proto))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pickup directory %s never created", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tmp := filepath.Join(dir, "."+name+".part")
	if err := os.WriteFile(tmp, payload, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// tgSubmitCLI runs `gateway submit` (the real binary) against g's admin
// API.
func tgSubmitCLI(g *tgGateway, proto outbound.Protocol, name string, payload []byte) error {
	f := filepath.Join(g.dir, "cli-"+name)
	if err := os.WriteFile(f, payload, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "submit", "-url", "http://"+g.admin, "-partner", g.partnerID,
		"-protocol", string(proto), "-file", f, "-filename", name, "-content-type", "application/edifact")
	cmd.Env = append(os.Environ(), "GATEWAY_TEST_RUN_MAIN=1", "GATEWAY_ADMIN_TOKEN="+twoGWToken)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("gateway submit %s: %v\n%s", name, err, out)
	}
	return nil
}

// tgList is every message g queued for its partner (the API's list, paged).
func tgList(t *testing.T, g *tgGateway) []submitapi.Status {
	t.Helper()
	var all []submitapi.Status
	before := ""
	for range 100 {
		u := fmt.Sprintf("http://%s/api/v1/outbound/messages?partner=%s&limit=1000%s", g.admin, g.partnerID, before)
		code, body := tgAPI(t, http.MethodGet, u, nil, nil)
		var l submitapi.List
		if code != 200 || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list: %d %s", code, body)
		}
		all = append(all, l.Messages...)
		if l.NextBefore == nil {
			return all
		}
		before = "&before=" + url.QueryEscape(l.NextBefore.Format(time.RFC3339Nano)) +
			"&before_id=" + url.QueryEscape(l.NextBeforeID)
	}
	t.Fatal("list: more than 100 pages")
	return nil
}

// tgStatus is what the test needs of a message, from either the API or
// the embedded gateway's store.
type tgStatus struct {
	id, messageID, state, kind, disposition, signer, sha string
	attempts                                             int
}

func tgFromAPI(s submitapi.Status) tgStatus {
	st := tgStatus{id: s.ID, messageID: s.MessageID, state: s.State, sha: s.SHA256, attempts: s.Attempts}
	if s.Evidence != nil {
		st.kind, st.disposition, st.signer = s.Evidence.Kind, s.Evidence.Disposition, s.Evidence.Signer
	}
	return st
}

func tgFromStore(m outbound.Message) tgStatus {
	st := tgStatus{id: m.ID, messageID: m.MessageID, state: string(m.State), sha: m.SHA256, attempts: m.Attempts}
	if m.Evidence != nil {
		st.kind, st.disposition, st.signer = m.Evidence.Kind, m.Evidence.Disposition, m.Evidence.Signer
	}
	return st
}

// tgWaitFinal polls list until every message is final and there are n.
func tgWaitFinal(t *testing.T, what string, n int, list func() []tgStatus) []tgStatus {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ms := list()
		final := 0
		for _, m := range ms {
			if outbound.State(m.state).Final() {
				final++
			}
		}
		if final == len(ms) && len(ms) >= n {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d messages final after 90 s (want %d)", what, final, len(ms), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tgInbox reads the sidecars of a receiving gateway's inbox: the message
// ids each payload (by SHA-256) was received under.
func tgInbox(t *testing.T, root string) (byHash map[string][]string, received map[string]time.Time) {
	t.Helper()
	byHash, received = map[string][]string{}, map[string]time.Time{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, inbox.SidecarSuffix) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var sc inbox.Sidecar
		if err := json.Unmarshal(b, &sc); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		byHash[sc.SHA256] = append(byHash[sc.SHA256], sc.MessageID)
		received[sc.SHA256] = sc.Received
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return byHash, received
}

// tgAuditSends are the decisions of the "send" records of a gateway's
// audit file, per message id, in order.
func tgAuditSends(t *testing.T, file string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var r struct {
			Step     string `json:"step"`
			ID       string `json:"message_id"`
			Decision string `json:"decision"`
		}
		if len(line) == 0 || json.Unmarshal(line, &r) != nil {
			continue
		}
		if r.Step == "send" {
			out[r.ID] = append(out[r.ID], r.Decision)
		}
	}
	return out
}

// tgSettledAsync: an audit's send decisions of a message settled by an
// asynchronous MDN: one delivered, at most one awaiting (in either order:
// the intake and the Sender write their records concurrently), nothing
// else.
func tgSettledAsync(decisions []string) bool {
	n := map[string]int{}
	for _, d := range decisions {
		n[d]++
	}
	return n["delivered"] == 1 && n["awaiting"] <= 1 && len(decisions) == n["delivered"]+n["awaiting"]
}

// tgEmbedded is a gateway in the test process with A's identity and
// partner directory on a store of its own.
func tgEmbedded(t *testing.T, a *tgGateway) *server.Server {
	t.Helper()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(cfgFile, gatewayYAML(t, "127.0.0.1:0", "sqlite:"+filepath.Join(dir, "gw.db"), filepath.Join(a.dir, "partners"),
		fmt.Sprintf("handler: {type: dir, inbox: %s}\nshutdown_timeout: 2s\n", filepath.Join(dir, "inbox"))), 0o600)
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeListeners(ctx, ln, adm) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("embedded gateway: %v", err)
		}
		srv.Close()
	})
	return srv
}

// TestTwoGatewaysTradeBothWays: A (SQLite) and B (PostgreSQL) send to each
// other over AS2 and AS4, each submission made through the HTTP API (every
// key POSTed twice), a pickup directory, `gateway submit` or the Go API
// of an embedded gateway. Every submission is delivered once, under the
// Message-ID its sender assigned, with verified evidence signed by the
// partner's certificate; B's asynchronous MDNs settle its AS2 messages;
// the console and gateway_outbound_final_total count them all.
func TestTwoGatewaysTradeBothWays(t *testing.T) {
	if testing.Short() {
		t.Skip("two real gateways, PostgreSQL")
	}
	const perWay = 20
	a, b, _ := tgSetUp(t)
	emb := tgEmbedded(t, a)
	ctx := context.Background()

	var wants []tgWant
	var mu sync.Mutex
	add := func(w tgWant) { mu.Lock(); wants = append(wants, w); mu.Unlock() }
	var wg sync.WaitGroup
	for _, proto := range []outbound.Protocol{outbound.AS2, outbound.AS4} {
		p := strings.ToUpper(string(proto))
		for _, g := range []*tgGateway{a, b} {
			// The HTTP API.
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWay {
					name := fmt.Sprintf("%s%sH%02d", g.name, p, i)
					pl := tgPayload(g.receivesAs, g.sendsTo, name)
					if err := tgSubmitHTTP(g, proto, "key-"+name, name+".edi", pl); err != nil {
						t.Error(err)
						return
					}
					add(tgWant{from: g.name, way: "http", proto: proto, name: name + ".edi", sha: tgSHA(pl)})
				}
			}()
			// The pickup directory.
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWay {
					name := fmt.Sprintf("%s%sP%02d", g.name, p, i)
					pl := tgPayload(g.receivesAs, g.sendsTo, name)
					if err := tgDrop(g, proto, name+".edi", pl); err != nil {
						t.Error(err)
						return
					}
					add(tgWant{from: g.name, way: "pickup", proto: proto, name: name + ".edi", sha: tgSHA(pl)})
				}
			}()
		}
		// `gateway submit` against A's admin API.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWay {
				name := fmt.Sprintf("A%sC%02d", p, i)
				pl := tgPayload("GATEWAY", "DEMO", name)
				if err := tgSubmitCLI(a, proto, name+".edi", pl); err != nil {
					t.Error(err)
					return
				}
				add(tgWant{from: "A", way: "cli", proto: proto, name: name + ".edi", sha: tgSHA(pl)})
			}
		}()
		// The Go API of the embedded gateway (A's identity, its own store).
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWay {
				name := fmt.Sprintf("E%sG%02d", p, i)
				pl := tgPayload("GATEWAY", "DEMO", name)
				sub := outbound.Submission{Partner: "b", Protocol: proto, IdempotencyKey: "go-" + name,
					Payload: bytes.NewReader(pl), ContentType: "application/edifact", Filename: name + ".edi"}
				for j, wantCreated := range []bool{true, false} {
					if _, created, err := emb.Submit(ctx, sub); err != nil || created != wantCreated {
						t.Errorf("Submit %s #%d: created %v, %v", name, j+1, created, err)
						return
					}
				}
				add(tgWant{from: "E", way: "go", proto: proto, name: name + ".edi", sha: tgSHA(pl)})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Every submission became one message, and every message ended
	// delivered.
	count := map[string]int{}
	for _, w := range wants {
		count[w.from]++
	}
	sent := map[string][]tgStatus{}
	for _, g := range []*tgGateway{a, b} {
		sent[g.name] = tgWaitFinal(t, g.name, count[g.name], func() []tgStatus {
			var out []tgStatus
			for _, s := range tgList(t, g) {
				out = append(out, tgFromAPI(s))
			}
			return out
		})
	}
	sent["E"] = tgWaitFinal(t, "embedded", count["E"], func() []tgStatus {
		ms, err := emb.Outbound().List(ctx, outbound.Filter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []tgStatus
		for _, m := range ms {
			out = append(out, tgFromStore(m))
		}
		return out
	})
	byGateway := map[string]*tgGateway{"A": a, "B": b, "E": a}
	received := map[string]map[string][]string{}
	for _, g := range []*tgGateway{a, b} {
		received[g.name], _ = tgInbox(t, g.inbox)
	}
	sends := tgAuditSends(t, b.audit)
	for from, ms := range sent {
		if len(ms) != count[from] {
			t.Errorf("%s queued %d messages for %d submissions", from, len(ms), count[from])
		}
		bySHA := map[string]tgStatus{}
		for _, m := range ms {
			if _, dup := bySHA[m.sha]; dup {
				t.Errorf("%s: payload %s queued twice", from, m.sha)
			}
			bySHA[m.sha] = m
		}
		g := byGateway[from]
		rx := received["B"]
		if g == b {
			rx = received["A"]
		}
		for _, w := range wants {
			if w.from != from {
				continue
			}
			m, ok := bySHA[w.sha]
			switch {
			case !ok:
				t.Errorf("%s: not queued", w)
				continue
			case m.state != string(outbound.Delivered):
				t.Errorf("%s: %s", w, m.state)
				continue
			}
			wantKind := "mdn"
			if w.proto == outbound.AS4 {
				wantKind = "receipt"
			}
			if m.kind != wantKind || !strings.Contains(m.signer, g.partnerCert.Subject.CommonName) {
				t.Errorf("%s: evidence %q %q signed by %q, want a %s signed by %q", w, m.kind, m.disposition, m.signer, wantKind, g.partnerCert.Subject.CommonName)
			}
			if got := rx[w.sha]; len(got) != 1 || strings.Trim(got[0], "<>") != strings.Trim(m.messageID, "<>") {
				t.Errorf("%s: received as %q, want once as %q", w, got, m.messageID)
			}
			// B asked A for asynchronous MDNs: B's audit has the MDN
			// intake's delivered, beside the Sender's awaiting (absent
			// when the MDN came before the Sender recorded its attempt:
			// the attempt then finds the message settled).
			if from == "B" && w.proto == outbound.AS2 && !tgSettledAsync(sends[m.messageID]) {
				t.Errorf("%s: B's audit of %s: %v, want [awaiting delivered] or [delivered]", w, m.messageID, sends[m.messageID])
			}
		}
	}
	tgCheckEvidence(t, a, sent["A"])
	tgCheckEvidence(t, b, sent["B"])
	gws := map[string]*tgGateway{"A": a, "B": b}
	tgCheckPickup(t, gws, wants)
	tgCheckConsoleAndMetrics(t, gws, sent, wants)
	if !t.Failed() {
		for _, proto := range []outbound.Protocol{outbound.AS2, outbound.AS4} {
			tgMeasure(t, a, b, proto, 100)
		}
	}
}

// tgMeasure submits n messages from a to b through the HTTP API (8 at a
// time) and prints the sending throughput (first submission to last
// delivered) beside the receiving one (b's first to last payload
// received) of the same run. It prints only: tests assert no speed.
func tgMeasure(t *testing.T, a, b *tgGateway, proto outbound.Protocol, n int) {
	t.Helper()
	tag := fmt.Sprintf("M%s%d", strings.ToUpper(string(proto)), time.Now().UnixNano()%100000)
	shas := map[string]bool{}
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = tgPayload("GATEWAY", "DEMO", fmt.Sprintf("%s%04d", tag, i))
		shas[tgSHA(payloads[i])] = true
	}
	before := len(tgList(t, a))
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				u := fmt.Sprintf("http://%s/api/v1/outbound/messages?partner=b&protocol=%s", a.admin, proto)
				if code, body, err := tgDo(http.MethodPost, u, map[string]string{"Idempotency-Key": fmt.Sprintf("%s-%d", tag, i)}, payloads[i]); err != nil || code != http.StatusAccepted {
					t.Errorf("measure: submit %d: %d %s %v", i, code, body, err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	submitted := time.Since(start)
	ms := tgWaitFinal(t, "measure", before+n, func() []tgStatus {
		var out []tgStatus
		for _, s := range tgList(t, a) {
			out = append(out, tgFromAPI(s))
		}
		return out
	})
	sending := time.Since(start)
	var first, last time.Time
	_, received := tgInbox(t, b.inbox)
	got := 0
	for sha, at := range received {
		if !shas[sha] {
			continue
		}
		got++
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	delivered := 0
	for _, m := range ms {
		if shas[m.sha] && m.state == string(outbound.Delivered) {
			delivered++
		}
	}
	if delivered != n || got != n {
		t.Errorf("measure %s: %d delivered, %d received, want %d", proto, delivered, got, n)
		return
	}
	recv := last.Sub(first)
	t.Logf("%s A→B, %d messages: submitted in %v (%.0f msgs/s); sending %.1f msgs/s (first submission to last delivered, %v); receiving %.1f msgs/s (B's first to last payload received, %v)",
		proto, n, submitted.Round(time.Millisecond), float64(n)/submitted.Seconds(),
		float64(n)/sending.Seconds(), sending.Round(time.Millisecond), float64(n-1)/recv.Seconds(), recv.Round(time.Millisecond))
}

// tgCheckEvidence fetches every message's evidence through the API: the
// MDN or receipt as received, with its kind.
func tgCheckEvidence(t *testing.T, g *tgGateway, ms []tgStatus) {
	t.Helper()
	for _, m := range ms {
		resp, err := func() (*http.Response, error) {
			req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/api/v1/outbound/messages/%s/evidence", g.admin, m.id), nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+twoGWToken)
			return http.DefaultClient.Do(req)
		}()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n == 0 || resp.Header.Get("X-Evidence-Kind") != m.kind {
			t.Errorf("%s: evidence of %s: %d, %d bytes, kind %q (want %q)", g.name, m.id, resp.StatusCode, n, resp.Header.Get("X-Evidence-Kind"), m.kind)
		}
	}
}

// tgCheckPickup: every file dropped is in sent/ with its MDN or receipt
// beside it (moved there once its message is final).
func tgCheckPickup(t *testing.T, gws map[string]*tgGateway, wants []tgWant) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, w := range wants {
		if w.way != "pickup" {
			continue
		}
		g := gws[w.from]
		sentDir := filepath.Join(g.pick, g.partnerID, string(w.proto), "sent")
		beside := w.name + ".mdn"
		if w.proto == outbound.AS4 {
			beside = w.name + ".receipt.xml"
		}
		for {
			_, err1 := os.Stat(filepath.Join(sentDir, w.name))
			fi, err2 := os.Stat(filepath.Join(sentDir, beside))
			if err1 == nil && err2 == nil && fi.Size() > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: not in %s with %s beside it (%v, %v)", w, sentDir, beside, err1, err2)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

var (
	tgConsoleRow   = regexp.MustCompile(`/console/outbound/message\?id=([0-9a-zA-Z]+)`)
	tgConsoleOlder = regexp.MustCompile(`href="(/console/outbound\?[^"]*before=[^"]*)"`)
)

// tgConsoleIDs are the ids the console's outbound page lists for g's
// partner in state, every page followed.
func tgConsoleIDs(t *testing.T, g *tgGateway, state string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	next := "/console/outbound?state=" + state + "&partner=" + g.partnerID
	for range 50 {
		code, body := tgAPI(t, http.MethodGet, "http://"+g.admin+next, map[string]string{"Accept": "text/html"}, nil)
		if code != 200 {
			t.Fatalf("console %s: %d %s", next, code, body)
		}
		for _, m := range tgConsoleRow.FindAllSubmatch(body, -1) {
			ids[string(m[1])] = true
		}
		m := tgConsoleOlder.FindSubmatch(body)
		if m == nil {
			return ids
		}
		next = html.UnescapeString(string(m[1]))
	}
	t.Fatal("console: more than 50 pages")
	return nil
}

// tgCheckConsoleAndMetrics: the console's outbound page lists every
// delivered message and gateway_outbound_final_total counts them.
func tgCheckConsoleAndMetrics(t *testing.T, gws map[string]*tgGateway, sent map[string][]tgStatus, wants []tgWant) {
	t.Helper()
	for _, name := range []string{"A", "B"} {
		g := gws[name]
		listed := tgConsoleIDs(t, g, "delivered")
		if len(listed) != len(sent[name]) {
			t.Errorf("console of %s lists %d delivered messages, want %d", name, len(listed), len(sent[name]))
		}
		for _, m := range sent[name] {
			if !listed[m.id] {
				t.Errorf("console of %s does not list %s", name, m.id)
			}
		}
		code, body := tgAPI(t, http.MethodGet, "http://"+g.admin+"/metrics", nil, nil)
		if code != 200 {
			t.Fatalf("metrics of %s: %d", name, code)
		}
		for _, proto := range []outbound.Protocol{outbound.AS2, outbound.AS4} {
			want := 0
			for _, w := range wants {
				if w.from == name && w.proto == proto {
					want++
				}
			}
			got, _ := metricValue(string(body), "gateway_outbound_final_total",
				map[string]string{"partner": g.partnerID, "protocol": string(proto), "state": "delivered"})
			if int(got) != want {
				t.Errorf("%s: gateway_outbound_final_total{protocol=%s,state=delivered} = %v, want %d", name, proto, got, want)
			}
			if name == "B" && proto == outbound.AS2 {
				tgCheckAsyncMetrics(t, gws["A"], string(body), want)
			}
		}
	}
}

// tgCheckAsyncMetrics: no AS2 attempt of B (which asks for asynchronous
// MDNs) ended delivered on its HTTP answer; each ended awaiting, or found
// the message settled already (lease_lost); and A posted n asynchronous
// MDNs, every one taken at the first attempt.
func tgCheckAsyncMetrics(t *testing.T, a *tgGateway, bMetrics string, n int) {
	t.Helper()
	outcome := func(o string) int {
		v, _ := metricValue(bMetrics, "gateway_outbound_attempts_total", map[string]string{"partner": "a", "protocol": "as2", "outcome": o})
		return int(v)
	}
	if d, aw, ll := outcome("delivered"), outcome("awaiting"), outcome("lease_lost"); d != 0 || aw+ll != n {
		t.Errorf("B's AS2 attempts: delivered %d, awaiting %d, lease_lost %d; want 0 and %d awaiting or lease_lost", d, aw, ll, n)
	}
	code, body := tgAPI(t, http.MethodGet, "http://"+a.admin+"/metrics", nil, nil)
	if code != 200 {
		t.Fatalf("metrics of A: %d", code)
	}
	got := map[string]int{}
	for _, r := range []string{"delivered", "retry", "gave_up"} {
		v, _ := metricValue(string(body), "gateway_mdn_outbox_attempts_total", map[string]string{"result": r})
		got[r] = int(v)
	}
	if got["delivered"] != n || got["retry"] != 0 || got["gave_up"] != 0 {
		t.Errorf("A's asynchronous MDN deliveries: %v, want %d delivered at the first attempt", got, n)
	}
}
