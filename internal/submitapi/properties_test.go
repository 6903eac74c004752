package submitapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/edigateway/gateway/outbound"
)

// newQueueAPI serves the API over a real outbound.Queue (its checks of a
// submission's properties) with partners acme (AS2) and bdew (AS4),
// mapping the Queue's errors as the gateway does.
func newQueueAPI(t *testing.T) (*httptest.Server, *outbound.Memory) {
	t.Helper()
	st := outbound.NewMemory()
	q := &outbound.Queue{Store: st, Log: slog.New(slog.DiscardHandler),
		Resolve: func(partner string, p outbound.Protocol) (outbound.Protocol, error) {
			want := map[string]outbound.Protocol{"acme": outbound.AS2, "bdew": outbound.AS4}[partner]
			switch {
			case want == "":
				return "", outbound.ErrUnknownPartner
			case p != "" && p != want:
				return "", outbound.ErrNoSending
			}
			return want, nil
		}}
	srv := httptest.NewServer(New(Config{Submitter: q, Store: st, MaxPayload: 1 << 20, Errors: []ErrorStatus{
		{outbound.ErrUnknownPartner, http.StatusNotFound}, {outbound.ErrNoSending, http.StatusUnprocessableEntity},
		{outbound.ErrInvalid, http.StatusBadRequest}}}))
	t.Cleanup(srv.Close)
	return srv, st
}

// propertyQuery is property=NAME=VALUE parameters in order.
func propertyQuery(kv ...string) string {
	var b strings.Builder
	for _, p := range kv {
		b.WriteString("&property=" + url.QueryEscape(p))
	}
	return b.String()
}

// Properties given as repeated property=NAME=VALUE parameters are queued
// in their order and shown by the status; the same key with other
// properties is a 409; invalid ones and any for AS2 are 400 with the
// reason, nothing queued.
func TestSubmitProperties(t *testing.T) {
	srv, st := newQueueAPI(t)
	base := srv.URL + Prefix + "/messages?partner=bdew"
	props := propertyQuery("BDEWDocumentType=UTILMD", "BDEWDocumentNo=4711=a", "BDEWDocumentDate=2026-12-05",
		"app:Note=Grüße <&>", "Empty=")
	want := []outbound.Property{{Name: "BDEWDocumentType", Value: "UTILMD"}, {Name: "BDEWDocumentNo", Value: "4711=a"},
		{Name: "BDEWDocumentDate", Value: "2026-12-05"}, {Name: "app:Note", Value: "Grüße <&>"}, {Name: "Empty", Value: ""}}
	hdr := map[string]string{"Idempotency-Key": "utilmd-4711"}
	r := do(t, "POST", base+props, hdr, strings.NewReader("UNB+UNOC:3"))
	if r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	s := decode[Submitted](t, r)
	m, err := st.Get(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !outbound.EqualProperties(m.Properties, want) {
		t.Fatalf("stored properties %q, want %q", m.Properties, want)
	}
	status := decode[Status](t, do(t, "GET", srv.URL+s.StatusURL, nil, nil))
	if !outbound.EqualProperties(status.Properties, want) {
		t.Fatalf("status shows properties %q, want %q", status.Properties, want)
	}
	if !strings.Contains(string(do(t, "GET", srv.URL+s.StatusURL, nil, nil).body), `"name": "BDEWDocumentType"`) {
		t.Error("the status JSON has no properties [{name, value}]")
	}

	// The same key, payload and properties: replayed.
	r = do(t, "POST", base+props, hdr, strings.NewReader("UNB+UNOC:3"))
	if r.status != http.StatusOK || decode[Submitted](t, r).ID != s.ID {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	// The same key and payload with other properties, fewer, or another
	// order: 409 naming the message.
	for _, other := range []string{
		propertyQuery("BDEWDocumentType=UTILMD", "BDEWDocumentNo=4712=a", "BDEWDocumentDate=2026-12-05", "app:Note=Grüße <&>", "Empty="),
		propertyQuery("BDEWDocumentType=UTILMD"),
		"",
		propertyQuery("BDEWDocumentNo=4711=a", "BDEWDocumentType=UTILMD", "BDEWDocumentDate=2026-12-05", "app:Note=Grüße <&>", "Empty="),
	} {
		r := do(t, "POST", base+other, hdr, strings.NewReader("UNB+UNOC:3"))
		if e := wantError(t, r, http.StatusConflict, "other properties"); e.ID != s.ID {
			t.Fatalf("409 names %q, want %s", e.ID, s.ID)
		}
	}

	many := make([]string, 33)
	for i := range many {
		many[i] = fmt.Sprintf("P%d=v", i)
	}
	for _, c := range []struct{ query, reason string }{
		{propertyQuery("NoEquals"), "want NAME=VALUE"},
		{propertyQuery("=v"), "empty name"},
		{propertyQuery("bad name=v"), "only A-Z"},
		{propertyQuery(strings.Repeat("n", 65) + "=v"), "longer than 64"},
		{propertyQuery("Doc=a\tb"), "control character"},
		{propertyQuery("Doc=" + strings.Repeat("v", 1025)), "at most 1024"},
		{propertyQuery("Doc=1", "DOC=2"), "given twice"},
		{propertyQuery("MimeType=text/plain"), "reserved"},
		{propertyQuery("compressiontype=none"), "reserved"},
		{propertyQuery(many...), "33 properties"},
		{"&protocol=as2" + propertyQuery("Doc=1"), "AS2"},
	} {
		wantError(t, do(t, "POST", base+c.query, nil, strings.NewReader("x")), http.StatusBadRequest, c.reason)
	}
	// AS2 found by the partner's set-up (no protocol given): the Queue's 400.
	wantError(t, do(t, "POST", srv.URL+Prefix+"/messages?partner=acme"+propertyQuery("Doc=1"), nil, strings.NewReader("x")),
		http.StatusBadRequest, "AS2")
	if ms, _ := st.List(context.Background(), outbound.Filter{}); len(ms) != 1 {
		t.Fatalf("%d messages queued, want 1", len(ms))
	}
}
