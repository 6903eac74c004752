package as2

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edigateway/gateway/mdn"
)

// TestMinimalPartnerRefusesPlainMessages: a partner file with only its
// AS2-From and certificates requires signed and encrypted messages (the
// secure defaults); an unsigned or unencrypted message that names its
// AS2-From gets insufficient-message-security through the real endpoint
// and reaches no handler. require_signature: false and require_encryption:
// false are the explicit opt-out that accepts them.
func TestMinimalPartnerRefusesPlainMessages(t *testing.T) {
	t.Parallel()
	minimal := newEnv(t, envOptions{partnerYAML: "  async_mdn_urls: [\"{{MDN}}/mdn\"]\n"})
	optOut := newEnv(t, envOptions{partnerYAML: "  require_signature: false\n  require_encryption: false\n"})
	for i, tc := range []struct {
		name           string
		sign, encrypt  bool
		minimal, plain mdn.Disposition
		why            string
	}{
		{"plain", false, false, mdn.DispInsufficientMessageSecurity, mdn.DispProcessed, "requires signed messages"},
		{"signed only", true, false, mdn.DispInsufficientMessageSecurity, mdn.DispProcessed, "requires encrypted messages"},
		{"encrypted only", false, true, mdn.DispInsufficientMessageSecurity, mdn.DispProcessed, "requires signed messages"},
		{"signed and encrypted", true, true, mdn.DispProcessed, mdn.DispProcessed, ""},
	} {
		for _, e := range []struct {
			name string
			env  *env
			want mdn.Disposition
		}{{"minimal", minimal, tc.minimal}, {"opt-out", optOut, tc.plain}} {
			t.Run(tc.name+"/"+e.name, func(t *testing.T) {
				c := e.env.client()
				c.SignedMDN = false
				if !tc.sign {
					c.SignDigest = ""
				}
				if !tc.encrypt {
					c.Cipher = ""
				}
				m := prepare(t, c, fmt.Sprintf("ISA*%d %s %s~", i, tc.name, e.name))
				resp, body := e.env.post(t, m.Header, m.Body)
				p := expectMDN(t, resp, body, e.want)
				if e.want.IsError() && !strings.Contains(p.Report.HumanText, tc.why) {
					t.Errorf("MDN text %q does not say %q", p.Report.HumanText, tc.why)
				}
				if n, want := e.env.handler.count(m.ID), map[bool]int{true: 0, false: 1}[e.want.IsError()]; n != want {
					t.Errorf("handled %d times, want %d", n, want)
				}
			})
		}
	}
}
