package as2

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/mdn"
	"github.com/edigateway/gateway/outbox"
)

// countingOutbox counts the deliveries the endpoint queues.
type countingOutbox struct {
	outbox.Store
	mu     sync.Mutex
	queued []outbox.Delivery
}

func (o *countingOutbox) Enqueue(ctx context.Context, d outbox.Delivery) error {
	o.mu.Lock()
	o.queued = append(o.queued, d)
	o.mu.Unlock()
	return o.Store.Enqueue(ctx, d)
}

func (o *countingOutbox) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queued)
}

// expectHandler503 checks the answer to a message the handler failed on:
// HTTP 503, Retry-After 60, a plain-text reason asking for a retransmission
// with the incident (no MDN). It returns the incident.
func expectHandler503(t *testing.T, resp *http.Response, body []byte) string {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("handler failure answered HTTP %d %q, want 503", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "60" {
		t.Errorf("Retry-After %q, want 60", ra)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain (no MDN)", ct)
	}
	incident := incidentRE.FindString(string(body))
	if incident == "" || !strings.Contains(string(body), exchange.IncidentNote(incident)) ||
		!strings.Contains(string(body), "not accepted") || !strings.Contains(string(body), "retransmit") {
		t.Errorf("body %q: want the reason, retransmit and the incident", body)
	}
	return incident
}

// TestHandlerFailureAnswers503: a message the business handler fails on (the
// back end is down) is answered HTTP 503 with Retry-After and the incident,
// in every MDN mode, and no MDN is sent or queued: AS2 senders take a
// negative MDN as final and never retransmit, but retry a 503. The audit's
// reply record says http-503 with the incident, one log line carries the
// incident (and no payload). Once the back end recovers, the partner's
// retransmission (same Message-ID, same bytes) is processed, accepted once
// and answered positively; the handler's effect happened once.
func TestHandlerFailureAnswers503(t *testing.T) {
	t.Parallel()
	for _, mode := range []as2client.MDNMode{as2client.MDNSync, as2client.MDNAsync, as2client.MDNNone} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			ob := &countingOutbox{Store: e.outbox}
			e.ep.cfg.Outbox = ob
			var calls atomic.Int32
			e.handler.setFail(func(*exchange.Message) error {
				if calls.Add(1) == 1 {
					return errors.New("ERP at http://erp.internal:8080 unreachable")
				}
				return nil
			})
			c := e.client()
			c.MDN = mode
			payload := "ISA*00*HANDLER503 " + string(mode) + "~"
			m := prepare(t, c, payload)

			resp, body := e.post(t, m.Header, m.Body)
			incident := expectHandler503(t, resp, body)
			if strings.Contains(string(body), "erp.internal") {
				t.Errorf("body %q names the handler's error", body)
			}
			if n := ob.count(); n != 0 {
				t.Errorf("%d MDNs queued for a handler failure", n)
			}

			// The audit: the handler's error and a reply record http-503,
			// both with the incident.
			var handlerRec, replyRec *audit.Record
			recs := e.auditFor(t, "ACME", m.ID)
			for i, r := range recs {
				switch r.Step {
				case audit.StepHandler:
					handlerRec = &recs[i]
				case audit.StepReply:
					replyRec = &recs[i]
				}
			}
			if handlerRec == nil || handlerRec.Decision != "error" || handlerRec.Incident != incident {
				t.Errorf("handler record %+v, want error with incident %s", handlerRec, incident)
			}
			if replyRec == nil || replyRec.Disposition != "http-503" || replyRec.Incident != incident {
				t.Errorf("reply record %+v, want http-503 with incident %s", replyRec, incident)
			}
			var lines []string
			for _, l := range strings.Split(e.logs.String(), "\n") {
				if strings.Contains(l, incident) {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || strings.Contains(lines[0], "HANDLER503") {
				t.Errorf("log lines with the incident: %q, want one without the payload", lines)
			}

			// The back end recovered: the retransmission is accepted.
			resp, body = e.post(t, m.Header, m.Body)
			switch mode {
			case as2client.MDNSync:
				expectMDN(t, resp, body, mdn.DispProcessed)
			case as2client.MDNAsync:
				if resp.StatusCode != http.StatusOK || len(body) != 0 {
					t.Fatalf("async retransmission: HTTP %d %q", resp.StatusCode, body)
				}
				got := e.mdns.wait(t, m.ID, 1)
				p, err := mdn.ParseHTTP(got.header, got.body)
				if err != nil || p.Report.Disposition.String() != mdn.DispProcessed.String() {
					t.Fatalf("async MDN of the retransmission: %v %+v", err, p)
				}
				if n := ob.count(); n != 1 {
					t.Errorf("%d MDNs queued, want 1 (the retransmission's)", n)
				}
			case as2client.MDNNone:
				if resp.StatusCode != http.StatusOK || len(body) != 0 {
					t.Fatalf("retransmission without MDN: HTTP %d %q", resp.StatusCode, body)
				}
			}
			// Accepted once: a further retransmission is a duplicate and
			// the handler does not run for it.
			resp, body = e.post(t, m.Header, m.Body)
			if mode == as2client.MDNSync {
				expectMDN(t, resp, body, mdn.DispDuplicateDocument)
			} else if resp.StatusCode != http.StatusOK {
				t.Fatalf("duplicate: HTTP %d %q", resp.StatusCode, body)
			}
			if n := e.handler.count(m.ID); n != 2 {
				t.Errorf("handler ran %d times, want 2 (failed, then the retransmission)", n)
			}
			if got := e.handler.payloads(m.ID); len(got) != 1 || string(got[0]) != payload {
				t.Errorf("handler payloads %q", got)
			}
			entries, err := os.ReadDir(filepath.Join(e.root, "inbox", "acme"))
			if err != nil {
				t.Fatal(err)
			}
			var files []string
			for _, en := range entries {
				if !strings.HasSuffix(en.Name(), inbox.SidecarSuffix) {
					files = append(files, en.Name())
				}
			}
			if len(files) != 1 {
				t.Errorf("inbox files %q, want the payload once", files)
			}
		})
	}
}
