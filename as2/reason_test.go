package as2

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/mdn"
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
		// The wording AS4's EBMS:0101 uses too (package trust).
		for _, want := range []string{`certificate "CN=partner 2,O=gateway as2 tests" (serial 1B5B)`, "expired on 2045-01-01T00:00:00Z",
			"valid from 2020-01-01T00:00:00Z to 2045-01-01T00:00:00Z", "checked at 2046-03-01T12:00:00Z"} {
			if !strings.Contains(reason, want) {
				t.Errorf("%s: reason lacks %s: %s", tc.name, want, p.Report.HumanText)
			}
		}
		if n := e.handler.count(m.ID); n != 0 {
			t.Fatalf("%s: handler ran %d times", tc.name, n)
		}
	}
}
