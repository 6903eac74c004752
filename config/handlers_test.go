package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHandlersRoutesParseAndResolve(t *testing.T) {
	p := write(t, `
handlers:
  - name: erp
    match: {partner: acme, protocol: as2, content_type: "application/edifact"}
    type: http
    http: {url: "https://erp.example/inbound", timeout: 30s, auth_header_env: ERP_AUTH, ca_file: ca.pem}
  - name: mapper
    match: {protocol: as4, service: "urn:*:invoicing", action: Deliver}
    type: exec
    exec:
      command: [./bin/map, --strict]
      dir: work
      timeout: 2m
      env: [ERP_DSN]
      max_output_bytes: 8192
  - name: sh
    match: {partner: beta}
    type: exec
    exec: {command: [sh, -c, "cat >/dev/null"]}
  - name: default
    type: dir
    dir: {inbox: var/inbox}
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	r := c.Routes()
	if len(r) != 4 || r[0].Name != "erp" || r[3].Name != "default" {
		t.Fatalf("routes %+v", r)
	}
	if r[0].Match != (RouteMatch{Partner: "acme", Protocol: "as2", ContentType: "application/edifact"}) ||
		r[0].HTTP.URL != "https://erp.example/inbound" || r[0].HTTP.Timeout != 30*time.Second ||
		r[0].HTTP.AuthHeaderEnv != "ERP_AUTH" || r[0].HTTP.CAFile != filepath.Join(dir, "ca.pem") {
		t.Errorf("erp: %+v", r[0])
	}
	e := r[1].Exec
	if e.Command[0] != filepath.Join(dir, "bin/map") || e.Command[1] != "--strict" || e.Dir != filepath.Join(dir, "work") ||
		e.Timeout != 2*time.Minute || e.Env[0] != "ERP_DSN" || e.MaxOutputBytes != 8192 || r[1].Match.Service != "urn:*:invoicing" {
		t.Errorf("mapper: %+v", r[1])
	}
	if r[2].Exec.Command[0] != "sh" || r[2].Exec.Command[2] != "cat >/dev/null" {
		t.Errorf("a program name from PATH was moved: %+v", r[2].Exec.Command)
	}
	if r[3].Dir.Inbox != filepath.Join(dir, "var/inbox") || r[3].Match != (RouteMatch{}) {
		t.Errorf("default: %+v", r[3])
	}
}

// The old single handler keeps working as a catch-all route.
func TestLegacyHandlerIsTheDefaultRoute(t *testing.T) {
	c, err := Load(write(t, "handler:\n  type: dir\n  inbox: in\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes()
	if len(r) != 1 || r[0].Name != "default" || r[0].Type != "dir" || r[0].Dir.Inbox != filepath.Join(filepath.Dir(c.File), "in") || r[0].Match != (RouteMatch{}) {
		t.Fatalf("routes %+v", r)
	}
	c, err = Load("")
	if err != nil || len(c.Routes()) != 1 || c.Routes()[0].Dir.Inbox != "var/inbox" {
		t.Fatalf("defaults: %v %+v", err, c)
	}
}

func TestHandlersConfigErrors(t *testing.T) {
	const last = "  - name: default\n    type: dir\n    dir: {inbox: in}\n"
	for _, tc := range []struct{ body, want string }{
		{"handlers:\n  - name: erp\n    match: {partner: acme}\n    type: dir\n    dir: {inbox: in}\n",
			"the last entry must have no match"},
		{"handlers:\n" + last + "  - name: erp\n    match: {partner: acme}\n    type: dir\n    dir: {inbox: in}\n",
			"handlers[1] (erp): unreachable: handlers[0] before it has no match"},
		{"handlers:\n  - name: erp\n    type: http\n    http: {url: https://e/x, tiemout: 3s}\n", "tiemout"},
		{"handlers:\n  - name: erp\n    match: {partner: acme, protokol: as2}\n    type: dir\n    dir: {inbox: in}\n" + last, "protokol"},
		{"handlers:\n  - name: erp\n    type: ftp\n", `handlers[0] (erp): type: "ftp" is not one of: dir, http, exec`},
		{"handlers:\n  - type: dir\n    dir: {inbox: in}\n", "handlers[0]: name: required"},
		{"handlers:\n  - name: Bad Name\n    type: dir\n    dir: {inbox: in}\n", "is not 1-64 of"},
		{"handlers:\n  - name: a\n    match: {partner: x}\n    type: dir\n    dir: {inbox: in}\n  - name: a\n    type: dir\n    dir: {inbox: in}\n", "handlers[1] (a): name: also used by handlers[0]"},
		{"handlers:\n  - name: a\n    type: dir\n", "handlers[0] (a): dir.inbox: required"},
		{"handlers:\n  - name: a\n    type: dir\n    dir: {inbox: in}\n    http: {url: https://e/x}\n", `http: set, but type is "dir"`},
		{"handlers:\n  - name: a\n    type: http\n    http: {url: \"erp.example/in\"}\n", "http.url"},
		{"handlers:\n  - name: a\n    type: http\n    http: {url: \"https://u:secret@erp/in\"}\n", "holds a password"},
		{"handlers:\n  - name: a\n    type: http\n    http: {url: \"https://erp/in\", auth_header_env: \"Bearer abc\"}\n", "not an environment variable name (value not shown"},
		{"handlers:\n  - name: a\n    type: http\n    http: {url: \"https://erp/in\", cert_file: c.pem}\n", "cert_file and http.key_file"},
		{"handlers:\n  - name: a\n    type: exec\n    exec: {dir: x}\n", "exec.command: required"},
		{"handlers:\n  - name: a\n    match: {protocol: as3}\n    type: dir\n    dir: {inbox: in}\n" + last, `match.protocol: "as3"`},
		{"handlers:\n  - name: a\n    match: {protocol: as2, service: x}\n    type: dir\n    dir: {inbox: in}\n" + last, "AS4 values"},
		{"handlers:\n  - name: a\n    match: {content_type: edifact}\n    type: dir\n    dir: {inbox: in}\n" + last, "not a media type pattern"},
		{"handler:\n  inbox: in\nhandlers:\n" + last, "handler and handlers are both set"},
		{"limits: {write_timeout: 1m}\nhandlers:\n  - name: a\n    type: http\n    http: {url: \"https://erp/in\", timeout: 1m}\n", "http.timeout: 1m0s is not between 0 and limits.write_timeout (1m0s)"},
		{"limits: {write_timeout: 1m}\nhandlers:\n  - name: a\n    type: exec\n    exec: {command: [x], timeout: 2m}\n", "exec.timeout: 2m0s is not between 0 and limits.write_timeout"},
		{"lease_heartbeat: 20s\n", "lease_heartbeat: 20s is not between 100ms and half the lease (15s)"},
		{"lease_heartbeat: 10ms\n", "lease_heartbeat: 10ms is not between 100ms"},
		{"handlers:\n  - name: a\n    type: exec\n    exec: {command: [x], env: [GATEWAY_STORE]}\n", "exec.env: GATEWAY_STORE: GATEWAY_ names"},
		{"handlers:\n  - name: a\n    type: exec\n    exec: {command: [x], env: [\"A=B\"]}\n", `exec.env: "A=B" is not`},
	} {
		_, err := Load(write(t, tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n err = %v\n want mention of %q", tc.body, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "u:secret") || strings.Contains(err.Error(), "abc")) {
			t.Errorf("error shows a password: %v", err)
		}
	}
	t.Setenv("GATEWAY_HANDLER_INBOX", "/srv/inbox")
	if _, err := Load(write(t, "handlers:\n"+last)); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("GATEWAY_HANDLER_INBOX with handlers: %v", err)
	}
}

// TestHandlerTimeoutBeyondLease: a handler may run longer than the lease
// (the claim is renewed while it runs); its timeout is bounded by
// limits.write_timeout instead.
func TestHandlerTimeoutBeyondLease(t *testing.T) {
	c, err := Load(write(t, "lease: 3s\nhandlers:\n  - name: a\n    type: exec\n    exec: {command: [x], timeout: 10s}\n"))
	if err != nil {
		t.Fatalf("exec.timeout 10s under lease 3s: %v", err)
	}
	if c.Lease != 3*time.Second || c.LeaseHeartbeat != 0 {
		t.Errorf("lease %v, lease_heartbeat %v", c.Lease, c.LeaseHeartbeat)
	}
	c, err = Load(write(t, "handlers:\n  - name: a\n    type: http\n    http: {url: \"https://erp/in\"}\n"))
	if err != nil || c.Lease != 30*time.Second {
		t.Fatalf("default lease: %v %v, want 30s", c, err)
	}
}
