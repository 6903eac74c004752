package endpoint

import (
	"fmt"
	"time"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/wssec"
	"github.com/edigateway/gateway/partners"
)

// checkMessageAge refuses a message whose signed time is older than the
// partner's dedup window plus its clock skew, or later than now plus the
// clock skew. The signed times are the eb:MessageInfo/eb:Timestamp of the
// verified eb:Messaging and the wsu:Timestamp/wsu:Created of the security
// header when a verified reference covers it; an unsigned value says
// nothing and is not used.
//
// Why: the gateway recognises a retransmission only while the dedup record
// of its eb:MessageId exists, that is for the dedup window. A message
// captured and replayed after the record is purged would otherwise be
// processed a second time; its signed time shows it is that old.
//
// EBMS:0101 FailedAuthentication, as for an expired or future
// wsu:Timestamp (wssec): the signature verifies, but it does not
// authenticate a message sent now; WS-Security reports a stale timestamp
// as a security failure (wsse:MessageExpired), which ebMS 3 Core §6.7.2
// maps to 0101. EBMS:0103 PolicyNoncompliance would tell the sender that
// its security settings differ from the agreement, which they need not.
func checkMessageAge(um *as4.UserMessage, ts *wssec.Timestamp, now time.Time, pa *partners.AS4) *as4.Error {
	window, skew := pa.DedupWindow.Std(), pa.ClockSkew.Std()
	if skew <= 0 {
		skew = wssec.DefaultClockSkew // as the wsu:Timestamp check
	}
	type signedTime struct {
		name string
		t    time.Time
	}
	times := []signedTime{{"eb:Timestamp", um.MessageInfo.Timestamp}}
	if ts != nil && ts.Signed {
		times = append(times, signedTime{"wsu:Timestamp/wsu:Created", ts.Created})
	}
	for _, st := range times {
		if st.t.IsZero() {
			continue
		}
		if st.t.After(now.Add(skew)) {
			return as4.FailedAuthentication(fmt.Sprintf(
				"the signed %s %s is later than our clock %s plus the agreed clock skew %s; check the sender's clock",
				st.name, st.t.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), skew), nil)
		}
		if window > 0 && now.Sub(st.t) > window+skew {
			return as4.FailedAuthentication(fmt.Sprintf(
				"the signed %s %s is older than the %s within which this gateway recognises a retransmission (dedup window %s plus clock skew %s); "+
					"a message this old is not accepted, send it again as a new message with a new eb:MessageId",
				st.name, st.t.UTC().Format(time.RFC3339), window+skew, window, skew), nil)
		}
	}
	return nil
}
