package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
)

// faultTestConfig writes a gateway configuration for the demo partner (AS2
// and AS4) with a dir handler in dir and returns its path.
func faultTestConfig(t *testing.T, dir, addr string) string {
	t.Helper()
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, gatewayYAML(t, addr, "sqlite:gw.db", "", "admin:\n  listen: 127.0.0.1:0\nlease: 2s\nhandler:\n  inbox: inbox\nshutdown_timeout: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestProductionBuildIgnoresFaultInjection: the gateway as built for
// production (here the test binary, built without the gatewayfault tag)
// does not read GATEWAY_FAULT_*: with every fault variable set it neither
// kills itself nor delays nor journals, on AS2 and AS4; and the fault code
// is not in it.
func TestProductionBuildIgnoresFaultInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway")
	}
	dir := t.TempDir()
	addr := freePort(t)
	cfg := faultTestConfig(t, dir, addr)
	journal := filepath.Join(dir, "journal")
	for _, phase := range []string{"before", "during", "after"} {
		t.Run(phase, func(t *testing.T) {
			// The test binary, never the gatewayfault build.
			startGatewayBinary(t, os.Args[0], cfg, addr,
				"GATEWAY_FAULT_KILL="+phase+":1", "GATEWAY_FAULT_JOURNAL="+journal, "GATEWAY_FAULT_HANDLER_DELAY=60s")
			demo := filepath.Dir(demoConfig(t))
			partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
			gwKeys := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
			client := &as2client.Client{URL: "http://" + addr + "/as2", From: "DEMO", To: "GATEWAY",
				SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
				RecipientCerts: []*x509.Certificate{gwKeys.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync, SignedMDN: true}
			msg, err := client.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+F"+phase+"'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+F"+phase+"'"), "application/edifact", "invoice.edi")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := client.Send(ctx, msg)
			if err != nil || !res.OK() || res.MDN.Disposition.IsWarning() {
				logs, _ := filepath.Glob(filepath.Join(dir, "serve-*.log"))
				t.Fatalf("AS2: %v %+v\n%s", err, res, logTail(logs[len(logs)-1]))
			}
			var out, errb bytes.Buffer
			edi := filepath.Join(demo, "invoice.edi")
			if code := run([]string{"send-as4", "-url", "http://" + addr + "/as4",
				"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
				"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
				"-from", "urn:demo:partner", "-to", "urn:demo:gateway",
				"-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
				"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", "fault-" + phase + "@demo", "-timeout", "20s", "-quiet", edi}, &out, &errb); code != 0 {
				t.Fatalf("AS4: exit %d: %s %s", code, out.String(), errb.String())
			}
			// Still alive: GATEWAY_FAULT_KILL was not read.
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatalf("the gateway is gone after the sends: %v", err)
			}
			resp.Body.Close()
			if _, err := os.Stat(journal); !os.IsNotExist(err) {
				t.Fatalf("GATEWAY_FAULT_JOURNAL was read: %v", err)
			}
		})
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "serve-*.log"))
	for _, l := range logs {
		if b, _ := os.ReadFile(l); bytes.Contains(b, []byte("fault injection")) {
			t.Errorf("%s: fault injection logged:\n%s", l, b)
		}
	}
	if len(logs) != 3 {
		t.Errorf("%d gateway logs, want 3", len(logs))
	}
	// The fault code is not even linked in: the production build (go
	// build without tags) lacks the symbols the gatewayfault build has.
	prod := filepath.Join(t.TempDir(), "gateway")
	if out, err := exec.Command(goTool(), "build", "-o", prod, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	faultSyms := []string{"server.newFaultKill", "server.journalHandler", "server.(*faultKill).at", "server.faultOutbound.Posting"}
	for bin, want := range map[string]bool{prod: false, faultGateway(t): true} {
		out, err := exec.Command(goTool(), "tool", "nm", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool nm %s: %v: %s", bin, err, out)
		}
		if !bytes.Contains(out, []byte("server.New")) {
			t.Fatalf("go tool nm %s lists no server.New: not the gateway's symbols?", bin)
		}
		for _, sym := range faultSyms {
			if bytes.Contains(out, []byte(sym)) != want {
				t.Errorf("%s: symbol %s present: %v, want %v", bin, sym, !want, want)
			}
		}
	}
}
