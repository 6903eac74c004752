package as2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/outbox"
	"github.com/edigateway/gateway/partners"
)

// decideAsync follows the Receipt-Delivery-Option of a partner without
// as2.async_mdn_urls only for a message signed by the partner (unwrapping
// verified the signature against the partner's certificates), and only to
// a host that is not a non-public IP address; the dispatcher checks the
// addresses a host name resolves to at every attempt. Otherwise the MDN
// goes on the HTTP response, as for unknown or unauthenticated senders:
// the partner still gets its receipt, and the message is not refused for
// where it asked the receipt to go.
func (e *Endpoint) decideAsync(x *inbound, signed bool) {
	u := x.asyncPending
	if u == "" {
		return
	}
	x.asyncPending = ""
	if !signed {
		e.refuseAsync(x, u, "the message is not signed, and without as2.async_mdn_urls only signed messages get an asynchronous MDN")
		return
	}
	if pu, err := url.Parse(u); err == nil {
		if a, err := netip.ParseAddr(pu.Hostname()); err == nil {
			if why := outbox.NonPublic(a); why != "" {
				e.refuseAsync(x, u, fmt.Sprintf("%s is a %s address, and without as2.async_mdn_urls asynchronous MDNs go to public addresses only", a, why))
				return
			}
		}
	}
	x.mode, x.asyncURL = deliverAsync, u
}

// refuseAsync answers synchronously instead of posting the MDN to the
// Receipt-Delivery-Option, with a log line and an audit record saying why.
func (e *Endpoint) refuseAsync(x *inbound, u, why string) {
	x.mode, x.asyncURL = deliverSync, ""
	x.lg.Warn("async MDN refused; the MDN goes on the HTTP response", "url", redactURL(u), "reason", why)
	if a := e.cfg.Pipeline.Audit; a != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Write(ctx, audit.Record{Time: e.now().UTC(), Step: audit.StepDelivery, Partner: x.partner.ID, Protocol: "as2",
			MessageID: dedup.NormalizeMessageID(x.req.MessageID), Key: string(dedup.TransportKey("as2", "as2", x.req.From, x.req.MessageID)),
			Decision: "async-mdn-refused", Disposition: "sync", Error: "Receipt-Delivery-Option " + redactURL(u) + ": " + why}); err != nil {
			x.lg.Error("audit write failed", "err", err)
		}
	}
}

// AsyncMDNAuthorizer is the outbox.Dispatcher's Authorize for AS2 async
// MDNs: at every attempt, the delivery's URL must still be allowed by its
// partner's current agreement (it matches as2.async_mdn_urls, or the
// partner has none); the Permit carries the non-public networks that
// agreement lists for it.
func AsyncMDNAuthorizer(dir *partners.Directory) func(context.Context, outbox.Delivery) (outbox.Permit, error) {
	return func(_ context.Context, del outbox.Delivery) (outbox.Permit, error) {
		var p *partners.Partner
		for _, q := range dir.Partners {
			if q.ID == del.Partner {
				p = q
			}
		}
		if p == nil || p.AS2 == nil {
			return outbox.Permit{}, fmt.Errorf("partner %q has no AS2 agreement", del.Partner)
		}
		u, err := url.Parse(del.URL)
		if err != nil {
			return outbox.Permit{}, errors.New("the URL does not parse")
		}
		pol := p.AS2.AsyncMDN(u)
		if !pol.Allowed() {
			return outbox.Permit{}, fmt.Errorf("%s matches none of as2.async_mdn_urls of partner %s (%s)", redactURL(del.URL), p.ID, p.File)
		}
		return outbox.Permit{Private: pol.Private}, nil
	}
}
