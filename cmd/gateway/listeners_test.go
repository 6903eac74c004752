package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestListenerThatCannotBindNamesTheSetting: serve (the real binary) on a
// configuration whose listen, then admin.listen, is an address another
// program holds exits 1 with the address, the reason, and the setting, its
// GATEWAY_* variable and the flag to change it.
func TestListenerThatCannotBindNamesTheSetting(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().String()
	fixture := filepath.Dir(demoConfig(t))
	for _, tc := range []struct {
		key, listen, admin, want string
	}{
		{"listen", busy, "127.0.0.1:0", "listen " + busy + ": address already in use; set listen in %s (or GATEWAY_LISTEN), or run serve -listen HOST:PORT"},
		{"admin.listen", "127.0.0.1:0", busy, "admin.listen " + busy + ": address already in use; set admin.listen in %s (or GATEWAY_ADMIN_LISTEN), or run serve -admin-listen HOST:PORT"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "gateway.yaml")
			y := fmt.Sprintf("listen: %s\nadmin:\n  listen: %s\nstore: sqlite:var/gw.db\npartners: %s\nidentity:\n  as2_id: GATEWAY\n"+
				"  party_id: urn:demo:gateway\n  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered\n  keys:\n"+
				"    - cert: %s\n      key: %s\nhandler:\n  inbox: var/inbox\n",
				tc.listen, tc.admin, filepath.Join(fixture, "partners"), filepath.Join(fixture, "keys", "gateway.pem"), filepath.Join(fixture, "keys", "gateway.key"))
			if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "serve", "-config", cfg)
			cmd.Env = []string{"GATEWAY_TEST_RUN_MAIN=1"}
			for _, e := range os.Environ() {
				if !strings.HasPrefix(e, "GATEWAY_") {
					cmd.Env = append(cmd.Env, e)
				}
			}
			out, err := cmd.CombinedOutput()
			want := fmt.Sprintf(tc.want, cfg)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), want) {
				t.Fatalf("serve with %s on a held address: %v; want exit 1 and %q in:\n%s", tc.key, err, want, out)
			}
		})
	}
}
