package config

import (
	"strings"
	"testing"
)

// TestUnknownKeysNameFileLineAndNearestKey: a misspelt key of gateway.yaml
// is refused with the file, its line and the nearest valid key (viper said
// "” has invalid keys: leese", without file or line); valid keys of every
// level, lists and squashed blocks included, pass.
func TestUnknownKeysNameFileLineAndNearestKey(t *testing.T) {
	p := write(t, `listen: 127.0.0.1:8080
leese: 5m
admin:
  lisen: 127.0.0.1:9090
  tls: {cert: a.pem, key: a.key, clent_ca: ca.pem}
handlers:
  - name: all
    type: dir
    dir: {inbx: inbox}
identity:
  keys:
    - {cert: a.pem, key: a.key, key_pasword_env: X}
peppol:
  revocation: {mode: ocsp}
`)
	_, err := Load(p)
	if err == nil {
		t.Fatal("misspelt keys accepted")
	}
	for _, want := range []string{
		p + `:2: unknown key "leese" (did you mean "lease"?)`,
		p + `:4: unknown key "admin.lisen" (did you mean "admin.listen"?)`,
		p + `:5: unknown key "admin.tls.clent_ca" (did you mean "admin.tls.client_ca"?)`,
		p + `:9: unknown key "handlers[0].dir.inbx" (did you mean "handlers[0].dir.inbox"?)`,
		p + `:12: unknown key "identity.keys[0].key_pasword_env" (did you mean "identity.keys[0].key_password_env"?)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not say\n%s", err, want)
		}
	}
	if strings.Contains(err.Error(), "has invalid keys") || strings.Count(err.Error(), "unknown key") != 5 {
		t.Errorf("want exactly the five unknown keys:\n%v", err)
	}
}

// TestUnknownKeysAndInvalidValuesInOneRun: a file with a misspelt key and
// invalid values names them all in one error (it stopped at the unknown
// key), and with the unknown key alone the file is still refused.
func TestUnknownKeysAndInvalidValuesInOneRun(t *testing.T) {
	p := write(t, "store: memory\nleese: 5m\nlog_level: loud\nretention: 1m\n")
	_, err := Load(p)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		p + `:2: unknown key "leese" (did you mean "lease"?)`,
		`log_level: "loud" is not one of debug, info, warn, error`,
		"retention: 1m0s is shorter than 1h",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not say\n%s", err, want)
		}
	}
	if _, err := Load(write(t, "store: memory\nleese: 5m\n")); err == nil || !strings.Contains(err.Error(), `unknown key "leese"`) {
		t.Errorf("unknown key alone: %v", err)
	}
}
