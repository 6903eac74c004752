package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/server"
)

// sendingGateway is a gateway with the demo partner's identity (AS2 id
// DEMO) whose one partner "gw" is the gateway at receiverURL (AS2 id
// GATEWAY), served on loopback listeners so that its Sender runs. It
// returns its admin base URL.
func sendingGateway(t *testing.T, receiverURL string) string {
	t.Helper()
	d, dir := demoDir(t), t.TempDir()
	pdir := filepath.Join(dir, "partners")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(d, "keys", "gateway.pem"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Join(pdir, "gateway.pem"): string(pem),
		filepath.Join(pdir, "gw.yaml"): fmt.Sprintf(`id: gw
as2:
  as2_id: GATEWAY
  certificates: [gateway.pem]
  send: {url: "%[1]s/as2"}
as4:
  party_id: urn:demo:gateway
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [gateway.pem]
  pmodes: [{id: inv, service: "urn:demo:invoicing", action: Deliver}]
  send: {url: "%[1]s/as4", pmode: {id: inv}}
`, receiverURL),
		filepath.Join(dir, "gateway.yaml"): fmt.Sprintf(`store: "sqlite:%s"
partners: %s
identity:
  as2_id: DEMO
  party_id: urn:demo:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys: [{cert: %s, key: %s}]
handler: {type: dir, inbox: %s}
shutdown_timeout: 2s
`, filepath.Join(dir, "gw.db"), pdir, filepath.Join(d, "partners", "demo-partner.pem"), filepath.Join(d, "keys", "demo-partner.key"), filepath.Join(dir, "inbox")),
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(filepath.Join(dir, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s, err := server.New(ctx, cfg, slog.New(slog.DiscardHandler))
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
	go func() { served <- s.ServeListeners(ctx, ln, adm) }()
	t.Cleanup(func() { stop(); <-served; s.Close() })
	return "http://" + adm.Addr().String()
}

var sendLine = regexp.MustCompile(`^send (as2|as4): (\d+) msgs, submitted in \S+ \(\d+\.\d msgs/s\), all final in \S+: sent (\d+\.\d) msgs/s; ` +
	`failed (\d+), not final (\d+); sending gateway CPU (\d+\.\d)ms/msg, receiving gateway CPU (\d+\.\d)ms/msg\n$`)

// TestSendMode: -mode send submits through a sending gateway's API to a
// receiving gateway: every message is delivered (the receiver's inbox has
// each once), and the line reports sent msgs/s and both gateways' CPU
// (here one process: both figures are the test process's; scripts/load.sh
// MODE=send runs two).
func TestSendMode(t *testing.T) {
	recvURL, inboxDir, _, recvAdmin := demoGatewayAdmin(t)
	sendAdmin := sendingGateway(t, recvURL)
	for _, protocol := range []string{"as2", "as4"} {
		var out, errOut bytes.Buffer
		code := run([]string{"-mode", "send", "-submit-url", sendAdmin, "-partner", "gw", "-protocol", protocol,
			"-n", "30", "-c", "4", "-size", "2000", "-unb-sender", "DEMO", "-unb-recipient", "GATEWAY",
			"-metrics", sendAdmin + "/metrics", "-recv-metrics", recvAdmin + "/metrics", "-timeout", "1m"}, &out, &errOut)
		m := sendLine.FindStringSubmatch(out.String())
		if code != 0 || m == nil || m[2] != "30" || m[4] != "0" || m[5] != "0" || m[3] == "0.0" || m[6] == "0.0" || m[7] == "0.0" {
			t.Fatalf("%s: exit %d\n%s%s", protocol, code, out.String(), errOut.String())
		}
		t.Log(strings.TrimSpace(out.String()))
	}
	// Each of the 60 interchanges reached the receiver once.
	var payloads int
	filepath.WalkDir(inboxDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".meta.json") {
			payloads++
		}
		return nil
	})
	if payloads != 60 {
		t.Fatalf("the receiver's inbox has %d payloads, want 60", payloads)
	}
	// A partner the sending gateway does not know: exit 1 with the API's
	// words; -mode send without -partner: a usage error.
	var out, errOut bytes.Buffer
	if code := run([]string{"-mode", "send", "-submit-url", sendAdmin, "-partner", "nobody", "-n", "1"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "HTTP 404") {
		t.Fatalf("unknown partner: exit %d %s", code, errOut.String())
	}
	if code := run([]string{"-mode", "send", "-submit-url", sendAdmin}, &out, &errOut); code != 2 {
		t.Fatalf("without -partner: exit %d", code)
	}
	if code := run([]string{"-mode", "sned", "-partner", "gw"}, &out, &errOut); code != 2 {
		t.Fatalf("-mode sned: exit %d", code)
	}
	if code := run([]string{"-mode", "send", "-partner", "gw", "-submit-url", "http://192.0.2.1:8079"}, &out, &errOut); code != 2 {
		t.Fatalf("a -submit-url not on loopback: exit %d", code)
	}
}
