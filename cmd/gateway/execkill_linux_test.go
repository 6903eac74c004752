//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
)

// processAlive says whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func waitDead(t *testing.T, within time.Duration, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var left []int
		for _, p := range pids {
			if processAlive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v still running %s later", what, left, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecCommandDoesNotOutliveGatewayCrash: an exec handler's command
// (a shell script that started a grandchild) runs when the gateway is
// killed with SIGKILL. The command and the grandchild die with the gateway
// (the supervisor kills the process group); the record of the group is
// cleared at the next start, and the partner's retransmission then runs the
// command once, alone. (Before, both lived on, past the handler's timeout of 5 s, which
// nothing enforced any more.) On AS2 and AS4, with the real binary.
func TestExecCommandDoesNotOutliveGatewayCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway twice per protocol")
	}
	demo := filepath.Dir(demoConfig(t))
	for _, c := range []struct {
		proto string
		// alsoSupervisor kills the command's supervisor with the
		// gateway: the command dies with it (Pdeathsig), what it started
		// lives until the next start kills it (ReapLeftovers).
		alsoSupervisor bool
	}{{"as2", false}, {"as4", false}, {"as2", true}} {
		proto := c.proto
		name := proto
		if c.alsoSupervisor {
			name += "/supervisor killed too"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			addr := freePort(t)
			// The first run hangs with a grandchild (sleep); later runs
			// take the payload and succeed. Each run appends "pid child".
			handler := filepath.Join(dir, "erp.sh")
			os.WriteFile(handler, []byte(`#!/bin/sh
cat > /dev/null
if [ ! -e "`+dir+`/first" ]; then
  touch "`+dir+`/first"
  sleep 300 &
  echo "$$ $!" >> "`+dir+`/runs"
  wait
  exit 0
fi
echo "$$ 0" >> "`+dir+`/runs"
`), 0o700)
			cfg := filepath.Join(dir, "gateway.yaml")
			os.WriteFile(cfg, gatewayYAML(t, addr, "sqlite:gw.db", "", fmt.Sprintf(`admin:
  listen: 127.0.0.1:0
lease: 6s
spool_dir: spool
handlers:
  - name: erp
    type: exec
    exec:
      command: [%s]
      timeout: 5s
shutdown_timeout: 1s
`, handler)), 0o600)
			runs := func() [][2]int {
				b, _ := os.ReadFile(filepath.Join(dir, "runs"))
				var out [][2]int
				for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					if f := strings.Fields(l); len(f) == 2 {
						p, _ := strconv.Atoi(f[0])
						c, _ := strconv.Atoi(f[1])
						out = append(out, [2]int{p, c})
					}
				}
				return out
			}

			var send func(ctx context.Context) error
			switch proto {
			case "as2":
				partner := readKeyPair(t, filepath.Join(demo, "partners", "demo-partner.pem"), filepath.Join(demo, "keys", "demo-partner.key"))
				gw := readKeyPair(t, filepath.Join(demo, "keys", "gateway.pem"), filepath.Join(demo, "keys", "gateway.key"))
				client := &as2client.Client{URL: "http://" + addr + "/as2", From: "DEMO", To: "GATEWAY",
					SignCert: partner.Cert, SignKey: partner.Key, SignDigest: "sha256",
					RecipientCerts: []*x509.Certificate{gw.Cert}, Cipher: "aes256-cbc", MDN: as2client.MDNSync, SignedMDN: true}
				msg, err := client.Prepare([]byte("UNB+UNOA:2+DEMO:14+GATEWAY:14+261130:1200+EXEC1'UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNZ+1+EXEC1'"), "application/edifact", "invoice.edi")
				if err != nil {
					t.Fatal(err)
				}
				send = func(ctx context.Context) error {
					res, err := client.Send(ctx, msg)
					if err == nil && (!res.OK() || res.MDN.Disposition.IsWarning()) {
						err = fmt.Errorf("status %d, problems %v", res.Status, res.Problems)
					}
					return err
				}
			case "as4":
				send = func(ctx context.Context) error {
					var out, errb bytes.Buffer
					if code := run([]string{"send-as4", "-url", "http://" + addr + "/as4",
						"-key", filepath.Join(demo, "keys", "demo-partner.key"), "-cert", filepath.Join(demo, "partners", "demo-partner.pem"),
						"-receipt-cert", filepath.Join(demo, "keys", "gateway.pem"), "-encrypt-cert", filepath.Join(demo, "keys", "gateway.pem"),
						"-from", "urn:demo:partner", "-to", "urn:demo:gateway",
						"-from-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered", "-to-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered",
						"-service", "urn:demo:invoicing", "-action", "Deliver", "-message-id", "exec-1@demo", "-timeout", "20s", "-quiet",
						filepath.Join(demo, "invoice.edi")}, &out, &errb); code != 0 {
						return fmt.Errorf("send-as4: exit %d: %s %s", code, out.String(), errb.String())
					}
					return nil
				}
			}

			first := startGateway(t, cfg, addr)
			go send(context.Background()) // fails when the gateway dies
			waitFor(t, func() bool { return len(runs()) == 1 }, "the command to run")
			cmd, child := runs()[0][0], runs()[0][1]
			if !processAlive(cmd) || !processAlive(child) {
				t.Fatal("the command or its child is not running")
			}
			pgid, err := syscall.Getpgid(cmd)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })

			killedAt := time.Now()
			if c.alsoSupervisor {
				if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			first.Wait()
			if c.alsoSupervisor {
				waitDead(t, 2*time.Second, "the command after its supervisor and the gateway were killed", cmd)
				if !processAlive(child) {
					t.Fatal("the grandchild died without a supervisor to kill it")
				}
			} else {
				// The whole group goes with the gateway: the command and
				// what it started (its supervisor kills the group).
				waitDead(t, 2*time.Second, "the command's process group after the gateway was killed", cmd, child)
				t.Logf("process group gone %s after the SIGKILL", time.Since(killedAt).Round(time.Millisecond))
			}
			// The group is on record for the next start, which would kill
			// what still ran of it.
			records, _ := filepath.Glob(filepath.Join(dir, "spool", "gateway-exec-running", "*.run"))
			if len(records) != 1 || filepath.Base(records[0]) != strconv.Itoa(pgid)+".run" {
				t.Fatalf("the killed command's group %d is not on record: %v", pgid, records)
			}

			startGateway(t, cfg, addr)
			// Before the restarted gateway takes a message, nothing of the
			// group is left.
			waitDead(t, 2*time.Second, "the command's child after the restart", child)
			if records, _ := filepath.Glob(filepath.Join(dir, "spool", "gateway-exec-running", "*.run")); len(records) != 0 {
				t.Fatalf("records left after the restart: %v", records)
			}
			time.Sleep(6500 * time.Millisecond) // the dead process's lease (6s) runs out
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := send(ctx); err != nil {
				t.Fatalf("retransmission after the restart: %v", err)
			}
			if r := runs(); len(r) != 2 {
				t.Fatalf("runs %v, want the hung one and one more", r)
			}
		})
	}
}
