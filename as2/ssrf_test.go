package as2

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbox"
)

// internalService stands for something on the gateway's loopback or
// private network that an attacker would like the gateway to POST to.
func internalService(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// settle gives the dispatcher (polling every 50ms, notified on enqueue)
// the time to post anything it queued.
func settle(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		got, err := e.outbox.Lease(context.Background(), 10, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
}

func asyncRefusals(t *testing.T, e *env, messageID string) []audit.Record {
	t.Helper()
	var out []audit.Record
	for _, r := range e.auditFor(t, "ACME", messageID) {
		if r.Step == audit.StepDelivery && r.Decision == "async-mdn-refused" {
			out = append(out, r)
		}
	}
	return out
}

// Issue 8 item 4: anyone who knows the AS2-From of a partner with
// require_signature: false sent an unsigned message whose
// Receipt-Delivery-Option named a loopback service, and the gateway POSTed
// the MDN there. Without as2.async_mdn_urls an unsigned message gets its
// MDN on the response; nothing reaches the service; the refusal is logged
// and audited.
func TestUnsignedMessageGetsNoAsyncMDNWithoutList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: false\n  require_encryption: false\n"})
	target, hits := internalService(t)
	for i, rdo := range []string{target.URL + "/admin", strings.Replace(target.URL, "127.0.0.1", "localhost", 1) + "/x"} {
		c := e.client()
		c.SignDigest, c.Cipher, c.MDN, c.SignedMDN, c.AsyncURL = "", "", as2client.MDNAsync, false, rdo
		m := prepare(t, c, "ISA*unsigned "+rdo)
		resp, body := e.post(t, m.Header, m.Body)
		expectMDN(t, resp, body, mdn.DispProcessed)
		settle(t, e)
		if n := hits.Load(); n != 0 {
			t.Fatalf("%s: %d requests reached the internal service", rdo, n)
		}
		if n := e.handler.count(m.ID); n != 1 {
			t.Fatalf("%s: handler ran %d times", rdo, n)
		}
		recs := asyncRefusals(t, e, m.ID)
		if len(recs) != 1 || recs[0].Partner != "acme" || recs[0].Disposition != "sync" || !strings.Contains(recs[0].Error, "not signed") {
			t.Fatalf("%s: audit %+v", rdo, recs)
		}
		if l := e.logs.String(); strings.Count(l, "async MDN refused") != i+1 {
			t.Fatalf("%s: log:\n%s", rdo, l)
		}
	}
}

// A listed loopback URL is followed for a signed message, and for an
// unsigned one (the operator listed it); an unlisted URL is not, signed or
// not.
func TestListedAsyncMDNURLIsFollowedUnlistedIsNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{}) // lists {{MDN}}/mdn
	for _, sign := range []string{"sha256", ""} {
		c := e.client()
		c.SignDigest, c.MDN = sign, as2client.MDNAsync
		msg, err := c.Prepare([]byte("UNB+listed "+sign+"'"), "application/edifact", "x.edi")
		if err != nil {
			t.Fatal(err)
		}
		ch := sendAndCheck(t, e, c, msg, 1)
		if ch.MDN.Report.Disposition.String() != mdn.DispProcessed.String() || !ch.MICMatched {
			t.Fatalf("sign=%q: async MDN %v, MIC matched %v", sign, ch.MDN.Report.Disposition, ch.MICMatched)
		}
	}
	target, hits := internalService(t)
	for _, rdo := range []string{target.URL + "/mdn", e.mdns.srv.URL + "/other"} {
		c := e.client()
		c.MDN, c.AsyncURL = as2client.MDNAsync, rdo
		m := prepare(t, c, "ISA*unlisted "+rdo)
		resp, body := e.post(t, m.Header, m.Body)
		expectMDN(t, resp, body, mdn.DispProcessed)
		settle(t, e)
		if recs := asyncRefusals(t, e, m.ID); len(recs) != 1 || !strings.Contains(recs[0].Error, "matches none of the partner's as2.async_mdn_urls") {
			t.Fatalf("%s: audit %+v", rdo, recs)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached an unlisted URL", hits.Load())
	}
}

// Without a list, a signed message gets an async MDN only to a public
// address: a literal loopback or private address is refused at once, and a
// name resolving to loopback is refused by the dispatcher at the attempt.
func TestSignedMessageWithoutListOnlyPublicAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{partnerYAML: "  require_signature: true\n"})
	target, hits := internalService(t)
	c := e.client()
	c.MDN, c.AsyncURL = as2client.MDNAsync, target.URL+"/mdn"
	m := prepare(t, c, "ISA*signed literal")
	resp, body := e.post(t, m.Header, m.Body)
	expectMDN(t, resp, body, mdn.DispProcessed)
	if recs := asyncRefusals(t, e, m.ID); len(recs) != 1 || !strings.Contains(recs[0].Error, "127.0.0.1 is a loopback address") {
		t.Fatalf("audit %+v", recs)
	}

	// By name: queued (the address is not known yet), refused at the
	// attempt, given up, audited.
	c.AsyncURL = strings.Replace(target.URL, "127.0.0.1", "localhost", 1) + "/mdn"
	m = prepare(t, c, "ISA*signed name")
	resp, body = e.post(t, m.Header, m.Body)
	if resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("HTTP %d with %d bytes; want the async answer", resp.StatusCode, len(body))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := asyncDeliveryRefusals(t, e); len(got) > 0 {
			refused := got[0]
			if !strings.Contains(refused.Error, "loopback") || refused.MessageID != dedup.NormalizeMessageID(m.ID) {
				t.Fatalf("refusal %+v", refused)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal audited; log:\n%s", e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached loopback", hits.Load())
	}
}

// A queued MDN is checked against the partner's agreement at each attempt:
// a delivery whose URL the agreement does not list (here: queued by an
// earlier configuration) is refused without a request.
func TestQueuedAsyncMDNRecheckedAgainstCurrentList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	target, hits := internalService(t)
	ctx := context.Background()
	del := outbox.Delivery{ID: "old-1", Partner: "acme", MessageID: "<old@acme>", URL: target.URL + "/mdn",
		Header: http.Header{"Content-Type": {"multipart/report"}}, Body: []byte("mdn")}
	if err := e.outbox.Enqueue(ctx, del); err != nil {
		t.Fatal(err)
	}
	e.ep.cfg.Notify()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, st, err := e.outbox.Get(ctx, "old-1")
		if err != nil {
			t.Fatal(err)
		}
		if st == outbox.GaveUp {
			if got.Attempts != 1 || !strings.Contains(got.LastError, "matches none of as2.async_mdn_urls of partner acme") {
				t.Fatalf("%+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s %+v", st, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests", hits.Load())
	}
}

// A listed name whose resolver answer changes to loopback between two
// attempts of the same MDN: the first attempt reaches the listed private
// address, the second is refused at the attempt and nothing reaches
// loopback.
func TestListedNameResolvingToLoopbackIsRefusedAtTheAttempt(t *testing.T) {
	t.Parallel()
	var answer atomic.Value
	answer.Store(netip.MustParseAddr("127.0.0.2"))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var listedHits atomic.Int64
	listed := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		listedHits.Add(1)
		// The name now points at loopback; this attempt fails.
		answer.Store(netip.MustParseAddr("127.0.0.1"))
		w.WriteHeader(http.StatusServiceUnavailable)
	})}}
	listed.Start()
	t.Cleanup(listed.Close)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_, loopHits := internalServiceOn(t, "127.0.0.1:"+port)
	e := newEnv(t, envOptions{
		partnerYAML: "  require_signature: true\n  async_mdn_urls: [\"http://*.acme.test:" + port + "/mdn\"]\n  async_mdn_private_networks: [127.0.0.2/32]\n",
		lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host != "as2.acme.test" {
				return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
			}
			return []netip.Addr{answer.Load().(netip.Addr)}, nil
		},
	})
	c := e.client()
	c.MDN, c.AsyncURL = as2client.MDNAsync, "http://as2.acme.test:"+port+"/mdn"
	m := prepare(t, c, "ISA*rebinding")
	resp, body := e.post(t, m.Header, m.Body)
	if resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("HTTP %d with %d bytes; want the async answer", resp.StatusCode, len(body))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs := asyncDeliveryRefusals(t, e)
		if len(recs) == 1 {
			if !strings.Contains(recs[0].Error, "127.0.0.1 (loopback)") || recs[0].MessageID != dedup.NormalizeMessageID(m.ID) {
				t.Fatalf("refusal %+v", recs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal; listed hits %d; log:\n%s", listedHits.Load(), e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if listedHits.Load() != 1 || loopHits.Load() != 0 {
		t.Fatalf("listed address hit %d times, loopback %d times; want 1 and 0", listedHits.Load(), loopHits.Load())
	}
}

func internalServiceOn(t *testing.T, addr string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &hits
}

// asyncDeliveryRefusals are the dispatcher's refusals audited for ACME.
func asyncDeliveryRefusals(t *testing.T, e *env) []audit.Record {
	t.Helper()
	got, err := e.audit.(audit.Reader).Query(context.Background(), audit.Query{Partner: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Record
	for _, r := range got {
		if r.Step == audit.StepDelivery && r.Decision == "refused" {
			out = append(out, r)
		}
	}
	return out
}
