package deliver

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/textproto"
	"regexp"
	"strings"
	"testing"

	"github.com/edigateway/gateway/exchange"
)

type named string

func (n named) Handle(ctx context.Context, m *exchange.Message) error {
	m.Headers.Set("X-Routed-To", string(n))
	if n == "broken" {
		return errors.New("erp down")
	}
	return nil
}

func routed(t *testing.T, r *Router, m *exchange.Message) string {
	t.Helper()
	if m.Headers == nil {
		m.Headers = textproto.MIMEHeader{}
	}
	m.Headers.Del("X-Routed-To")
	if err := r.Handle(context.Background(), m); err != nil && !strings.Contains(err.Error(), "erp down") {
		return "error: " + err.Error()
	}
	return m.Headers.Get("X-Routed-To")
}

func as2msg(partner string, cts ...string) *exchange.Message {
	m := &exchange.Message{Partner: partner, Protocol: exchange.AS2, MessageID: "m", Headers: textproto.MIMEHeader{}}
	for _, ct := range cts {
		m.Payloads = append(m.Payloads, testPayload("", ct, "x"))
	}
	return m
}

func TestRouterFirstMatchWins(t *testing.T) {
	r := &Router{Routes: []Route{
		{Name: "acme-edi", Match: Match{Partner: "acme", Protocol: "as2", ContentType: "application/edi*"}, Handler: named("acme-edi")},
		{Name: "acme-any", Match: Match{Partner: "acme"}, Handler: named("acme-any")},
		// Never reached for acme: the route above takes every acme message.
		{Name: "acme-xml", Match: Match{Partner: "acme", ContentType: "*/xml"}, Handler: named("acme-xml")},
		{Name: "invoices", Match: Match{Protocol: "as4", Service: "urn:*:invoicing", Action: "Deliver"}, Handler: named("invoices")},
		{Name: "xml", Match: Match{ContentType: "*/*xml"}, Handler: named("xml")},
		{Name: "beta-?", Match: Match{Partner: "beta-?"}, Handler: named("beta-?")},
		{Name: "default", Handler: named("default")},
	}}
	as4 := func(partner, service, action string, cts ...string) *exchange.Message {
		m := as2msg(partner, cts...)
		m.Protocol = exchange.AS4
		m.Headers.Set("Service", service)
		m.Headers.Set("Action", action)
		return m
	}
	for _, tc := range []struct {
		m    *exchange.Message
		want string
	}{
		{as2msg("acme", "application/EDIFACT; charset=UNOC"), "acme-edi"},
		{as2msg("acme", "application/edifact", "application/edi-x12"), "acme-edi"},
		{as2msg("acme", "application/edifact", "application/pdf"), "acme-any"}, // not every payload matches
		{as2msg("acme", "application/xml"), "acme-any"},
		{as4("acme", "urn:acme:invoicing", "Deliver", "application/edifact"), "acme-any"},
		{as4("zeta", "urn:zeta:invoicing", "Deliver", "application/pdf"), "invoices"},
		{as4("zeta", "urn:zeta:invoicing", "Cancel", "application/pdf"), "default"},
		{as4("zeta", "urn:zeta:orders", "Deliver", "application/soap+xml"), "xml"},
		{as2msg("zeta", "text/xml"), "xml"},
		{as2msg("zeta"), "default"}, // no payloads: content_type routes do not match
		{as2msg("beta-1", "application/pdf"), "beta-?"},
		{as2msg("beta-12", "application/pdf"), "default"},
		{as2msg("ACME", "application/edifact"), "default"}, // partner ids are exact
	} {
		if got := routed(t, r, tc.m); got != tc.want {
			t.Errorf("%s %s %v %v: routed to %q, want %q", tc.m.Partner, tc.m.Protocol, tc.m.Headers, tc.m.Payloads, got, tc.want)
		}
	}
}

// An AS2 message never matches a route that names an AS4 service or action.
func TestRouterServiceRouteSkipsAS2(t *testing.T) {
	r := &Router{Routes: []Route{{Name: "svc", Match: Match{Service: "*"}, Handler: named("svc")}, {Name: "d", Handler: named("d")}}}
	if got := routed(t, r, as2msg("acme", "x/y")); got != "d" {
		t.Fatalf("routed to %q", got)
	}
}

func TestRouterNoMatchRefusesAndLogsError(t *testing.T) {
	var logs bytes.Buffer
	r := &Router{Routes: []Route{{Name: "acme", Match: Match{Partner: "acme"}, Handler: named("acme")}},
		Log: slog.New(slog.NewJSONHandler(&logs, nil))}
	err := r.Handle(context.Background(), as2msg("zeta", "application/pdf"))
	if !errors.Is(err, ErrNoRoute) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR"`) || !strings.Contains(logs.String(), `"partner":"zeta"`) {
		t.Fatalf("log: %s", logs.String())
	}
}

func TestRouterWrapsHandlerErrorWithRouteName(t *testing.T) {
	r := &Router{Routes: []Route{{Name: "erp", Handler: named("broken")}}}
	err := r.Handle(context.Background(), as2msg("acme", "x/y"))
	if err == nil || err.Error() != "route erp: erp down" {
		t.Fatalf("err = %v", err)
	}
}

func globRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range p {
		switch r {
		case '*':
			b.WriteString("(?s:.*)")
		case '?':
			b.WriteString("(?s:.)")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"", "", true}, {"", "a", false}, {"a*b", "ab", true}, {"a*b", "axxb", true}, {"a*b", "axxbc", false},
		{"urn:*", "urn:a/b/c", true}, {"?", "ü", true}, {"*x*y*", "axbyc", true}, {"*x*y*", "ayxb", false},
		{"application/*", "application/edifact", true}, {"**a", "a", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
	} {
		if got := Glob(tc.p, tc.s); got != tc.want || got != globRegexp(tc.p).MatchString(tc.s) {
			t.Errorf("Glob(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
}

func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"a*b", "axxb"}, {"*?*", "x"}, {"urn:*:inv?", "urn:a:invx"}, {"**", ""}, {"?ü*", "xü"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, s string) {
		if len(p) > 64 || len(s) > 256 {
			return
		}
		if got, want := Glob(p, s), globRegexp(p).MatchString(s); got != want {
			t.Fatalf("Glob(%q, %q) = %v, regexp says %v", p, s, got, want)
		}
	})
}
