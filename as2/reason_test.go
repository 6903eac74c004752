package as2

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"gateway/mdn"
)

// A signer whose certificate has expired gets authentication-failed naming
// the certificate and its dates, whether the signature verifies over the
// exact bytes or only after the line-ending repair (a proxy turned CRLF into
// LF), never integrity-check-failed.
func TestExpiredSignerIsAuthenticationFailedWithOrWithoutRepair(t *testing.T) {
	t.Parallel()
	getKeys(t)
	at := time.Date(2046, 3, 1, 12, 0, 0, 0, time.UTC) // partner 2's certificate ended 2045-01-01
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n", now: func() time.Time { return at }})
	for _, tc := range []struct {
		name string
		lf   bool
	}{{"exact bytes", false}, {"after line-ending repair", true}} {
		cl := e.client()
		cl.Cipher = ""
		m := prepare(t, cl, "ISA*00*          *00*          *ZZ*ACME*ZZ*GATEWAY~\n")
		if tc.lf {
			m.Body = bytes.ReplaceAll(m.Body, []byte("\r\n"), []byte("\n"))
		}
		resp, body := e.post(t, m.Header, m.Body)
		p := expectMDN(t, resp, body, mdn.DispAuthenticationFailed)
		reason, _, _ := strings.Cut(p.Report.HumanText, "Detail:") // the reason itself, not the error detail
		for _, want := range []string{`"partner 2"`, "2045-01-01", "2046-03-01"} {
			if !strings.Contains(reason, want) {
				t.Errorf("%s: reason lacks %s: %s", tc.name, want, p.Report.HumanText)
			}
		}
		if n := e.handler.count(m.ID); n != 0 {
			t.Fatalf("%s: handler ran %d times", tc.name, n)
		}
	}
}
