package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/trust"
	"github.com/edigateway/gateway/trust/trusttest"
)

// auditRecords reads the gateway's audit file.
func (x *trustTexts) auditRecords(t *testing.T) []audit.Record {
	t.Helper()
	f, err := os.Open(x.g.cfg.Audit.File)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// checkedAt hides the time a reason was written at (the two protocols'
// messages are a moment apart).
var checkedAt = regexp.MustCompile(`checked at [0-9TZ:-]+`)

func sameText(s string) string { return checkedAt.ReplaceAllString(s, "checked at T") }

// Issue 22 item 18: under trust: ca, a signer certificate that is expired
// or has an RSA-1024 key is refused on AS2 and AS4 with the same reason and
// the same trust and reply audit records, by the trust check before any
// verdict: never audited trusted/good and then refused for its size.
func TestCATrustRefusalsAreTheSameOnBothProtocols(t *testing.T) {
	x := startTrustTexts(t)
	for _, tc := range []struct {
		name     string
		signer   trusttest.Issued
		decision string
		reason   string
	}{
		{"expired", x.expired, "refused/expired", fmt.Sprintf(`the signer's certificate "CN=CACO Old,O=CA Co" (serial %s) expired on 2022-01-01T00:00:00Z (valid from 2020-01-01T00:00:00Z to 2022-01-01T00:00:00Z; checked at T)`,
			trust.Serial(x.expired.Cert))},
		{"rsa-1024", x.weak, "refused/weak-key", fmt.Sprintf(`the signer's certificate "CN=CACO Weak,O=CA Co" (serial %s) has a 1024-bit RSA key; at least 2048 bits are required`,
			trust.Serial(x.weak.Cert))},
	} {
		as2Reason, as4Reason := sameText(x.sendAS2(t, "CACO", tc.signer)), sameText(x.sendAS4(t, "urn:caco", tc.signer))
		if as2Reason != tc.reason || as4Reason != tc.reason {
			t.Errorf("%s: reasons differ:\n AS2  %s\n AS4  %s\n want %s", tc.name, as2Reason, as4Reason, tc.reason)
		}
		// The trust records of each protocol's message, exactly; the reply
		// records: rejected, with the reason first (what follows is each
		// protocol's own wrapping of the cause, for the log).
		trustRecs, replies := map[string][]string{}, map[string][]string{}
		for _, r := range x.auditRecords(t) {
			if r.Partner != "caco" || !strings.Contains(r.Error, `"CN=`+tc.signer.Cert.Subject.CommonName) {
				continue
			}
			switch r.Step {
			case audit.StepTrust:
				trustRecs[r.Protocol] = append(trustRecs[r.Protocol], r.Decision+": "+sameText(r.Error))
			case audit.StepReply:
				reply := r.Decision
				if strings.HasPrefix(sameText(r.Error), tc.reason) {
					reply += ": <reason>…"
				}
				replies[r.Protocol] = append(replies[r.Protocol], reply)
			}
		}
		want := []string{tc.decision + ": " + tc.reason}
		if !slices.Equal(trustRecs["as2"], want) || !slices.Equal(trustRecs["as4"], want) {
			t.Errorf("%s: trust audit records differ:\n AS2  %q\n AS4  %q\n want %q", tc.name, trustRecs["as2"], trustRecs["as4"], want)
		}
		want = []string{"rejected: <reason>…"}
		if !slices.Equal(replies["as2"], want) || !slices.Equal(replies["as4"], want) {
			t.Errorf("%s: reply audit records differ:\n AS2  %q\n AS4  %q\n want %q", tc.name, replies["as2"], replies["as4"], want)
		}
	}
}
