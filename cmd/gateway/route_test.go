package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/server"
)

// TestRoutedHandlersThroughBothProtocols routes AS2 EDIFACT to the http
// handler and the AS4 invoicing service to the exec handler, everything
// else to the inbox. Each built-in handler fails the first delivery (HTTP
// 500, exit 1): the partner is asked to retransmit (AS2: HTTP 503 with
// Retry-After, no MDN; AS4: EBMS:0004), its retransmission is delivered
// with the same idempotency key, and nothing reaches the inbox.
func TestRoutedHandlersThroughBothProtocols(t *testing.T) {
	demo := filepath.Dir(demoConfig(t))
	cfg, err := config.Load(demoConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Store = "sqlite:" + filepath.Join(dir, "gw.db")
	cfg.Audit.File = ""

	var mu sync.Mutex
	var posts []http.Header
	var bodies []string
	erp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		posts = append(posts, r.Header.Clone())
		bodies = append(bodies, string(b))
		if len(posts) == 1 {
			http.Error(w, "ERP unavailable", http.StatusInternalServerError)
		}
	}))
	defer erp.Close()
	t.Setenv("ERP_AUTH", "Bearer route-test")

	out := filepath.Join(dir, "mapped")
	os.MkdirAll(out, 0o750)
	mapper := filepath.Join(dir, "map.sh")
	os.WriteFile(mapper, []byte(`#!/bin/sh
if [ ! -e "`+out+`/failed-once" ]; then
  touch "`+out+`/failed-once"
  echo "mapping table locked" >&2
  exit 1
fi
cat > "`+out+`/$GATEWAY_IDEMPOTENCY_KEY"
echo "$GATEWAY_PARTNER $GATEWAY_PROTOCOL $GATEWAY_MESSAGE_ID $GATEWAY_SERVICE $GATEWAY_ACTION" > "`+out+`/$GATEWAY_IDEMPOTENCY_KEY.meta"
`), 0o700)
	cfg.Handlers = []config.Route{
		{Name: "erp", Match: config.RouteMatch{Protocol: "as2", ContentType: "application/edi*"}, Type: "http",
			HTTP: config.HTTPHandler{URL: erp.URL + "/inbound", AuthHeaderEnv: "ERP_AUTH"}},
		{Name: "mapper", Match: config.RouteMatch{Protocol: "as4", Service: "urn:demo:invoic*", Action: "Deliver", ContentType: "*/xml"}, Type: "exec",
			Exec: config.ExecHandler{Command: []string{mapper}}},
		{Name: "default", Type: "dir", Dir: config.DirHandler{Inbox: filepath.Join(dir, "inbox")}},
	}
	var logs bytes.Buffer
	s, err := server.New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	// AS2 → erp.
	edi := []byte("UNA:+.? 'UNB+UNOA:2+DEMO:14+GATEWAY:14+261201:1200+ROUTE1'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-1+9'UNT+3+1'UNZ+1+ROUTE1'")
	partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
	gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
	c := &as2client.Client{URL: srv.URL + "/as2", From: "DEMO", To: "GATEWAY", SignCert: partner.Cert, SignKey: partner.Key,
		SignDigest: "sha256", RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes128-cbc", MDN: as2client.MDNSync, SignedMDN: true}
	msg, err := c.Prepare(edi, "application/edifact", "invoice.edi")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Send(context.Background(), msg)
	if err != nil || res.Status != http.StatusServiceUnavailable || res.RetryAfter != time.Minute || res.MDN != nil {
		t.Fatalf("AS2 first send (ERP answers 500): %v %+v, want HTTP 503 with Retry-After 60 and no MDN", err, res)
	}
	res, err = c.Send(context.Background(), msg)
	if err != nil || !res.OK() {
		t.Fatalf("AS2 retransmission: %v %+v", err, res)
	}
	mu.Lock()
	if len(posts) != 2 || posts[0].Get("Idempotency-Key") == "" || posts[0].Get("Idempotency-Key") != posts[1].Get("Idempotency-Key") ||
		posts[1].Get("X-Gateway-Reference") != "ROUTE1" || posts[1].Get("X-Gateway-Partner") != "demo" ||
		posts[1].Get("X-Gateway-Protocol") != "as2" || posts[1].Get("Authorization") != "Bearer route-test" || bodies[1] != string(edi) {
		t.Fatalf("ERP posts: %v", posts)
	}
	mu.Unlock()

	// AS4 → mapper.
	payload := filepath.Join(t.TempDir(), "invoice.xml")
	ubl := `<?xml version="1.0"?><Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:ID>R-AS4-1</cbc:ID></Invoice>`
	os.WriteFile(payload, []byte(ubl), 0o600)
	send := func(payload, id string) (int, string) {
		var o, e bytes.Buffer
		code := run([]string{"send-as4", "-url", srv.URL + "/as4",
			"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
			"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
			"-from", "urn:demo:partner", "-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
			"-to", "urn:demo:gateway", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
			"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", id, payload}, &o, &e)
		return code, o.String() + e.String()
	}
	if code, text := send(payload, "as4-route@demo"); code == 0 || !strings.Contains(text, "refused") {
		t.Fatalf("AS4 first send (mapper exits 1): %d %s", code, text)
	}
	if code, text := send(payload, "as4-route@demo"); code != 0 || !strings.Contains(text, "signature valid") {
		t.Fatalf("AS4 retransmission: %d %s", code, text)
	}
	var mapped []string
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".meta") && e.Name() != "failed-once" {
			mapped = append(mapped, e.Name())
		}
	}
	if len(mapped) != 1 {
		t.Fatalf("mapper outputs %v", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(out, mapped[0])); string(b) != ubl {
		t.Errorf("mapper stdin %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(out, mapped[0]+".meta")); strings.TrimSpace(string(b)) != "demo as4 as4-route@demo urn:demo:invoicing Deliver" {
		t.Errorf("mapper env %q", b)
	}
	if !strings.Contains(logs.String(), "mapping table locked") || !strings.Contains(logs.String(), "ERP unavailable") {
		t.Errorf("the handlers' failures are not in the log")
	}
	if strings.Contains(logs.String(), "route-test") {
		t.Errorf("the auth secret is in the log")
	}
	if files, _ := inbox.Payloads(filepath.Join(dir, "inbox", "demo")); len(files) != 0 {
		t.Errorf("inbox holds %v: a routed message also reached the default", files)
	}

	// What no route takes reaches the inbox, findable by message id and
	// reference: AS2 XML (erp takes EDI only), AS4 EDIFACT (mapper takes
	// XML only).
	xmsg, err := c.Prepare([]byte(strings.Replace(ubl, "R-AS4-1", "R-AS2-2", 1)), "application/xml", "invoice.xml")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Send(context.Background(), xmsg); err != nil || !res.OK() {
		t.Fatalf("AS2 XML: %v %+v", err, res)
	}
	ediFile := filepath.Join(t.TempDir(), "orders.edi")
	os.WriteFile(ediFile, []byte(strings.ReplaceAll(string(edi), "ROUTE1", "ROUTE4")), 0o600)
	if code, text := send(ediFile, "as4-dir@demo"); code != 0 || !strings.Contains(text, "signature valid") {
		t.Fatalf("AS4 EDIFACT: %d %s", code, text)
	}
	files, _ := inbox.Payloads(filepath.Join(dir, "inbox", "demo"))
	if len(files) != 2 {
		t.Fatalf("inbox holds %v", files)
	}
	as2ID := strings.Trim(xmsg.ID, "<>")
	for _, want := range []struct{ prefix, protocol, ref string }{{as2ID + "_R-AS2-2-", "as2", "R-AS2-2"}, {"as4-dir@demo_ROUTE4-", "as4", "ROUTE4"}} {
		var found string
		for _, f := range files {
			if strings.HasPrefix(f, want.prefix) {
				found = f
			}
		}
		if found == "" {
			t.Errorf("no inbox file starts with %q: %v", want.prefix, files)
			continue
		}
		var side inbox.Sidecar
		b, err := os.ReadFile(filepath.Join(dir, "inbox", "demo", found+inbox.SidecarSuffix))
		if err != nil || json.Unmarshal(b, &side) != nil {
			t.Fatalf("sidecar of %s: %v %s", found, err, b)
		}
		if side.Protocol != want.protocol || side.Partner != "demo" || side.Interchange == nil || side.Interchange.Reference != want.ref ||
			side.IdempotencyKey != side.Interchange.Key || side.File != found || len(side.SHA256) != 64 {
			t.Errorf("sidecar of %s: %s", found, b)
		}
	}
}
