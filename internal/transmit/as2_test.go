package transmit_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/testpki"
	"github.com/edigateway/gateway/internal/transmit"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbound"
)

const edi = "UNA:+.? 'UNB+UNOC:3+DEMO+GATEWAY+250101:1200+1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+1'"

// demo is our identity in these tests: the fixture's demo partner.
func demo(t testing.TB) transmit.Identity {
	kp := ours(t)
	return transmit.Identity{AS2ID: "DEMO", PartyID: "urn:demo:partner",
		PartyType: "urn:oasis:names:tc:ebcore:partyid-type:unregistered", Cert: kp.Cert, Key: kp.Key}
}

// identity is the Transmitters' identity provider: demo towards every
// partner.
func identity(t testing.TB) func(string) (transmit.Identity, error) {
	id := demo(t)
	return func(string) (transmit.Identity, error) { return id, nil }
}

// as2To returns a Transmitter sending to url as our gateway fixture
// expects (AS2-To GATEWAY, its certificate), with s tuned by tune.
func as2To(t testing.TB, url string, tune func(s *transmit.AS2Settings)) *transmit.AS2 {
	return as2ToIn(t, url, t.TempDir(), tune)
}

// as2ToIn is as2To building its messages in spool.
func as2ToIn(t testing.TB, url, spool string, tune func(s *transmit.AS2Settings)) *transmit.AS2 {
	gw := theirs(t)
	return transmit.NewAS2(identity(t), func(partner string) (*transmit.AS2Settings, error) {
		if partner != "gw" {
			return nil, fmt.Errorf("no partner %q", partner)
		}
		s := &transmit.AS2Settings{URL: url, To: "GATEWAY", PartnerCerts: certs(gw.Cert), SignedMDN: true}
		if tune != nil {
			tune(s)
		}
		return s, nil
	}, spool)
}

func as2Message(t testing.TB) *outbound.Message {
	id, err := transmit.NewMessageID(outbound.AS2, demo(t))
	if err != nil {
		t.Fatal(err)
	}
	return &outbound.Message{ID: "q1", Partner: "gw", Protocol: outbound.AS2, MessageID: id, ContentType: "application/edifact", Filename: "order.edi"}
}

// A signed, encrypted message to the served gateway with a sync signed
// MDN is delivered with the MDN as evidence; the same Message-ID sent
// again (a retry whose first answer was lost) is answered with the
// gateway's duplicate MDN, which is delivered too, and the payload
// reached the gateway's handler once.
func TestAS2SyncDelivered(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	tr := as2To(t, gw.URL+"/as2", nil)
	m := as2Message(t)
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Deliver || a.Evidence == nil || a.Evidence.Kind != "mdn" || !contains(a.Evidence.Signer, "serial") ||
		!contains(a.Evidence.Disposition, "processed") || len(a.Evidence.Body) == 0 || a.Status != 200 {
		t.Fatalf("attempt %+v evidence %+v", a, a.Evidence)
	}
	if len(m.Sent) != 1 || !strings.HasSuffix(m.Sent[0], ", sha-256") {
		t.Fatalf("sent %q", m.Sent)
	}
	a = attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Deliver || !contains(a.Evidence.Disposition, "duplicate") {
		t.Fatalf("second attempt %+v evidence %+v", a, a.Evidence)
	}
	if got := gw.received(); len(got) != 1 || got[0].sum != sum([]byte(edi)) {
		t.Fatalf("handler received %+v", got)
	}
}

// An async MDN: the attempt awaits it (AwaitFor the MDN timeout), the
// gateway posts it to the Receipt-Delivery-Option, and VerifyAsyncMDN
// settles the message delivered; the same MDN does not settle a message
// with another id or whose transmissions had another MIC.
func TestAS2AsyncAwaitThenVerifyAsyncMDN(t *testing.T) {
	type got struct {
		h    http.Header
		body []byte
	}
	mdns := make(chan got, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mdns <- got{r.Header.Clone(), b}
	}))
	defer recv.Close()
	gw := serveGateway(t, gatewayOptions{as2: "  async_mdn_urls: [\"" + recv.URL + "/mdn\"]\n"})
	tr := as2To(t, gw.URL+"/as2", func(s *transmit.AS2Settings) {
		s.MDN, s.AsyncMDNURL, s.MDNTimeout = "async", recv.URL+"/mdn", 42*time.Minute
	})
	m := as2Message(t)
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Await || a.AwaitFor != 42*time.Minute {
		t.Fatalf("attempt %+v", a)
	}
	var in got
	select {
	case in = <-mdns:
	case <-time.After(30 * time.Second):
		t.Fatal("no async MDN")
	}
	ctx := context.Background()
	delivered, reason, ev, err := tr.VerifyAsyncMDN(ctx, *m, in.h, in.body)
	if err != nil || !delivered || reason != "" || ev == nil || ev.Kind != "mdn" || ev.Signer == "" {
		t.Fatalf("delivered %v reason %q ev %+v err %v", delivered, reason, ev, err)
	}
	other := *m
	other.MessageID = "<other@DEMO>"
	if _, _, _, err := tr.VerifyAsyncMDN(ctx, other, in.h, in.body); err == nil || !contains(err.Error(), "Original-Message-ID") {
		t.Errorf("MDN of another message: %v", err)
	}
	wrongMIC := *m
	wrongMIC.Sent = []string{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=, sha-256"}
	if _, _, _, err := tr.VerifyAsyncMDN(ctx, wrongMIC, in.h, in.body); err == nil || !contains(err.Error(), "Received-Content-MIC") {
		t.Errorf("MDN with a MIC never sent: %v", err)
	}
	tampered := bytes.Replace(in.body, []byte("Original-Message-ID"), []byte("ORIGINAL-MESSAGE-ID"), 1)
	if bytes.Equal(tampered, in.body) {
		t.Fatal("nothing tampered")
	}
	if _, _, _, err := tr.VerifyAsyncMDN(ctx, *m, in.h, tampered); err == nil || !contains(err.Error(), "signature") {
		t.Errorf("tampered MDN: %v", err)
	}
}

// An unencrypted message to a gateway that requires encryption is
// answered with a signed negative MDN: refused, with the partner's words.
func TestAS2NegativeMDNRefused(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	tr := as2To(t, gw.URL+"/as2", func(s *transmit.AS2Settings) { s.Cipher = "none" })
	m := as2Message(t)
	a := attempt(t, tr, m, []byte(edi))
	if a.Outcome != outbound.Refuse || !contains(a.Reason, "processed/error") || a.Evidence == nil || a.Evidence.Signer == "" {
		t.Fatalf("attempt %+v evidence %+v", a, a.Evidence)
	}
	if got := gw.received(); len(got) != 0 {
		t.Fatalf("handler received %+v", got)
	}
}

// The served gateway's handler fails the first time (its back end is
// down): the gateway answers HTTP 503 with Retry-After, not a negative MDN,
// so the attempt is retried (with the gateway's Retry-After), not refused;
// the next attempt, the same Message-ID and bytes, is delivered with a
// positive MDN, and the handler received the payload once.
func TestAS2ReceiverHandlerFailureRetried(t *testing.T) {
	for _, mode := range []string{"sync", "none"} {
		t.Run(mode, func(t *testing.T) {
			gw := serveGateway(t, gatewayOptions{})
			gw.failNext(1)
			tr := as2To(t, gw.URL+"/as2", func(s *transmit.AS2Settings) { s.MDN = mode })
			m := as2Message(t)
			a := attempt(t, tr, m, []byte(edi))
			if a.Outcome != outbound.Retry || a.Status != 503 || a.RetryAfter != 60*time.Second || a.Evidence != nil {
				t.Fatalf("attempt %+v evidence %+v, want a retry after 60s", a, a.Evidence)
			}
			a = attempt(t, tr, m, []byte(edi))
			if a.Outcome != outbound.Deliver {
				t.Fatalf("second attempt %+v", a)
			}
			if mode == "sync" {
				if a.Evidence == nil || !strings.HasSuffix(a.Evidence.Disposition, "; processed") {
					t.Fatalf("second attempt: want a positive MDN as evidence, got %+v", a)
				}
			}
			if len(m.Sent) != 1 {
				t.Errorf("sent %q, want the same bytes twice", m.Sent)
			}
			if got := gw.received(); len(got) != 1 || got[0].sum != sum([]byte(edi)) {
				t.Fatalf("handler received %+v", got)
			}
		})
	}
}

// testClock is a settable clock for the Sender and its queue.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Our own sending side (outbound.Sender, the AS2 Transmitter, a queue on a
// clock) against the served gateway whose handler fails the first time:
// the message is queued again for the gateway's Retry-After (60s, over the
// policy's 1s), not failed; once that passed, the retry delivers it with
// the gateway's positive MDN, and the handler received the payload once.
func TestAS2SenderDeliversAfterReceiverHandlerFailure(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	gw.failNext(1)
	clk := &testClock{t: time.Now()}
	st := outbound.NewMemory(outbound.MemoryClock(clk.Now))
	pol := outbound.RetryPolicy{First: time.Second, Factor: 2, Max: time.Minute, GiveUpAfter: time.Hour}
	s := outbound.NewSender(outbound.SenderConfig{Store: st, Transmitters: map[outbound.Protocol]outbound.Transmitter{
		outbound.AS2: as2To(t, gw.URL+"/as2", nil)}, Policy: func(string, outbound.Protocol) outbound.RetryPolicy { return pol },
		Now: clk.Now, Poll: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	m, _, err := st.Submit(context.Background(), *as2Message(t), strings.NewReader(edi))
	if err != nil {
		t.Fatal(err)
	}
	s.Notify()
	waitMessage := func(what string, cond func(outbound.Message) bool) outbound.Message {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := st.Get(context.Background(), m.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cond(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: message %+v", what, got)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	got := waitMessage("first attempt", func(m outbound.Message) bool { return m.Attempts == 1 && m.LeaseToken == "" })
	if got.State != outbound.Queued || !strings.Contains(got.LastError, "503") || got.NextAttempt.Sub(clk.Now()) != 60*time.Second {
		t.Fatalf("after the handler failure: state %s, last error %q, next attempt in %v; want queued for 60s",
			got.State, got.LastError, got.NextAttempt.Sub(clk.Now()))
	}
	clk.Advance(60 * time.Second)
	s.Notify()
	got = waitMessage("delivered", func(m outbound.Message) bool { return m.State != outbound.Queued && m.LeaseToken == "" })
	if got.State != outbound.Delivered || got.Attempts != 2 || got.Evidence == nil || !strings.HasSuffix(got.Evidence.Disposition, "; processed") {
		t.Fatalf("after the retry: state %s, %d attempts, reason %q, evidence %+v", got.State, got.Attempts, got.Reason, got.Evidence != nil)
	}
	if r := gw.received(); len(r) != 1 || r[0].sum != sum([]byte(edi)) {
		t.Fatalf("handler received %+v", r)
	}
}

// HTTP answers without an MDN: 5xx, 408 and 429 are retried (with the
// partner's Retry-After), other 4xx refused; without an MDN asked for a
// 2xx is delivered.
func TestAS2StatusAnswers(t *testing.T) {
	for _, c := range []struct {
		status     int
		mdn        string
		want       outbound.Outcome
		retryAfter time.Duration
	}{
		{500, "", outbound.Retry, 0},
		{503, "", outbound.Retry, 7 * time.Second},
		{408, "", outbound.Retry, 0},
		{429, "", outbound.Retry, 7 * time.Second},
		{302, "", outbound.Retry, 0},
		{400, "", outbound.Refuse, 0},
		{403, "", outbound.Refuse, 0},
		{200, "none", outbound.Deliver, 0},
		{200, "", outbound.Retry, 0}, // a sync MDN asked for and none came
	} {
		t.Run(fmt.Sprintf("%d-%s", c.status, c.mdn), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if c.retryAfter > 0 {
					w.Header().Set("Retry-After", fmt.Sprint(int(c.retryAfter.Seconds())))
				}
				if c.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(c.status)
				fmt.Fprint(w, "partner says no")
			}))
			defer srv.Close()
			tr := as2To(t, srv.URL, func(s *transmit.AS2Settings) { s.MDN = c.mdn })
			a := attempt(t, tr, as2Message(t), []byte(edi))
			if a.Outcome != c.want || a.Status != c.status || a.RetryAfter != c.retryAfter {
				t.Fatalf("attempt %+v", a)
			}
			if c.want == outbound.Refuse && !contains(a.Reason, "partner says no") {
				t.Errorf("reason %q", a.Reason)
			}
		})
	}
}

// A partner that does not answer within the timeout, and one that is not
// listening: retried.
func TestAS2TimeoutAndConnectionRefused(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
	}))
	defer hang.Close()
	defer close(release)
	tr := as2To(t, hang.URL, func(s *transmit.AS2Settings) { s.Timeout = 300 * time.Millisecond })
	if a := attempt(t, tr, as2Message(t), []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "timeout") {
		t.Fatalf("hanging partner: %+v", a)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tr = as2To(t, "http://"+addr+"/as2", nil)
	if a := attempt(t, tr, as2Message(t), []byte(edi)); a.Outcome != outbound.Retry || !contains(a.Reason, "refused") {
		t.Fatalf("closed port: %+v", a)
	}
}

// posting's error stops the attempt before anything is sent.
func TestAS2PostingFailsNothingSent(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	tr := as2To(t, srv.URL, nil)
	m := as2Message(t)
	a := tr.Transmit(context.Background(), *m, func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(edi)), nil },
		func(string) error { return fmt.Errorf("store down") })
	if a.Outcome != outbound.Retry || !contains(a.Reason, "store down") || hits != 0 {
		t.Fatalf("attempt %+v, %d requests", a, hits)
	}
}

// The served gateway's MDN altered on its way (one field name's case in
// the signed report): not delivered, retried, saying why.
func TestAS2TamperedMDNNotDelivered(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/as2", r.Body)
		req.Header = r.Header.Clone()
		req.ContentLength = r.ContentLength
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		w.Write(bytes.Replace(b, []byte("Original-Message-ID"), []byte("ORIGINAL-MESSAGE-ID"), 1))
	}))
	defer proxy.Close()
	tr := as2To(t, proxy.URL, nil)
	a := attempt(t, tr, as2Message(t), []byte(edi))
	if a.Outcome != outbound.Retry || !contains(a.Reason, "signature does not verify") {
		t.Fatalf("attempt %+v", a)
	}
}

// scripted is a partner that answers every message with an MDN it makes
// itself: signed with key (nil: unsigned), carrying the MIC mic returns.
type scripted struct {
	mu  sync.Mutex
	mic func(posted string) string
	// posted is the digest of the transmission in flight.
	posted string
	key    *cms.KeyPair
	disp   mdn.Disposition
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	d := s.mic(s.posted)
	s.mu.Unlock()
	mic, alg, _ := strings.Cut(d, ", ")
	rep := mdn.Report{ReportingUA: "scripted", FinalRecipient: "GATEWAY", OriginalMessageID: r.Header.Get("Message-Id"),
		MIC: mic, MICAlg: alg, Disposition: s.disp, AS2From: "GATEWAY", AS2To: "DEMO"}
	var ct string
	var body []byte
	if s.key != nil {
		var err error
		ct, body, err = mdn.Sign(mdn.BuildEntity(rep), "sha-256", func(c []byte) ([]byte, error) {
			return cms.SignDetached(c, s.key.Cert, s.key.Key, "sha256")
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	} else {
		ct, body = mdn.Build(rep)
	}
	w.Header().Set("Content-Type", ct)
	w.Write(body)
}

func (s *scripted) attempt(t *testing.T, tr outbound.Transmitter, m *outbound.Message) outbound.Attempt {
	t.Helper()
	open := func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(edi)), nil }
	return tr.Transmit(context.Background(), *m, open, func(d string) error {
		s.mu.Lock()
		s.posted = d
		s.mu.Unlock()
		m.Sent = append(m.Sent, d)
		return nil
	})
}

// MDNs that are not the partner's verdict on this message are not
// delivered: a MIC that is none of the message's transmissions, an
// unsigned MDN when a signed one is required, one signed by a key that
// is not the partner's. The same partner with the right MIC and key
// delivers (the checks, not the partner, make the difference).
func TestAS2MDNsThatDoNotMatch(t *testing.T) {
	gw := theirs(t)
	otherKey := testpki.RSAKey(t, 1)
	other := cms.KeyPair{Cert: testpki.SelfSigned(t, otherKey, testpki.Cert{CommonName: "not the partner"}), Key: otherKey}
	right := func(p string) string { return p }
	wrong := func(string) string { return "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=, sha-256" }
	for _, c := range []struct {
		name      string
		mic       func(string) string
		key       *cms.KeyPair
		signedMDN bool
		want      outbound.Outcome
		reason    string
	}{
		{"right", right, &gw, true, outbound.Deliver, ""},
		{"wrong MIC", wrong, &gw, true, outbound.Retry, "Received-Content-MIC"},
		{"unsigned, signed required", right, nil, true, outbound.Retry, "not signed"},
		{"unsigned, not required", right, nil, false, outbound.Deliver, ""},
		{"other key", right, &other, true, outbound.Retry, "signature does not verify"},
		{"other key, not required", right, &other, false, outbound.Retry, "signature does not verify"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &scripted{mic: c.mic, key: c.key, disp: mdn.DispProcessed}
			srv := httptest.NewServer(p)
			defer srv.Close()
			tr := as2To(t, srv.URL, func(s *transmit.AS2Settings) { s.SignedMDN = c.signedMDN })
			a := p.attempt(t, tr, as2Message(t))
			if a.Outcome != c.want || !contains(a.Reason, c.reason) {
				t.Fatalf("attempt %+v", a)
			}
		})
	}
	// An earlier transmission's MIC (a partner answering a retry with its
	// first MDN) delivers.
	p := &scripted{key: &gw, disp: mdn.DispProcessed}
	m := as2Message(t)
	m.Sent = []string{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=, sha-256"}
	p.mic = func(string) string { return m.Sent[0] }
	srv := httptest.NewServer(p)
	defer srv.Close()
	if a := p.attempt(t, as2To(t, srv.URL, nil), m); a.Outcome != outbound.Deliver {
		t.Fatalf("earlier MIC: %+v", a)
	}
}

// The served gateway's MDN, signed with its key, checked against another
// certificate: not delivered.
func TestAS2MDNSignedByAnotherKey(t *testing.T) {
	gw := serveGateway(t, gatewayOptions{as2: "  require_encryption: false\n"})
	otherKey := testpki.RSAKey(t, 1)
	other := testpki.SelfSigned(t, otherKey, testpki.Cert{CommonName: "not the partner"})
	tr := as2To(t, gw.URL+"/as2", func(s *transmit.AS2Settings) { s.Cipher, s.PartnerCerts = "none", certs(other) })
	a := attempt(t, tr, as2Message(t), []byte(edi))
	if a.Outcome != outbound.Retry || !contains(a.Reason, "signature does not verify") {
		t.Fatalf("attempt %+v", a)
	}
	if got := gw.received(); len(got) != 1 {
		t.Fatalf("handler received %+v", got)
	}
}
