package as2

import (
	"errors"
	"sync"
	"testing"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/mdn"
)

// Through the real endpoint: a retransmission after a handler failure sees
// the same idempotency keys, and the same interchange resent under a new
// AS2 Message-ID keeps its payload key.
func TestIdempotencyKeysOverAS2(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{ledger: true})
	type seen struct{ msg, payload string }
	var mu sync.Mutex
	var runs []seen
	fail := true
	e.handler.setFail(func(m *exchange.Message) error {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, seen{m.IdempotencyKey, m.Payloads[0].IdempotencyKey})
		if fail {
			fail = false
			return errors.New("ERP booked the invoice, then timed out")
		}
		return nil
	})
	edi := "UNA:+.? 'UNB+UNOA:2+ACME:14+GATEWAY:14+261130:0930+IDEM1'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-1+9'UNT+3+1'UNZ+1+IDEM1'"
	c := e.client()
	m1 := prepare(t, c, edi)
	resp, body := e.post(t, m1.Header, m1.Body)
	expectHandler503(t, resp, body)
	resp, body = e.post(t, m1.Header, m1.Body) // the partner retransmits
	expectMDN(t, resp, body, mdn.DispProcessed)

	mu.Lock()
	fail = true
	mu.Unlock()
	edi2 := "UNA:+.? 'UNB+UNOA:2+ACME:14+GATEWAY:14+261130:0930+IDEM2'UNH+1+INVOIC:D:96A:UN'BGM+380+INV-2+9'UNT+3+1'UNZ+1+IDEM2'"
	m2 := prepare(t, c, edi2)
	resp, body = e.post(t, m2.Header, m2.Body)
	expectHandler503(t, resp, body)
	m3 := prepare(t, c, edi2) // the EDI system resends the interchange under a new Message-ID
	resp, body = e.post(t, m3.Header, m3.Body)
	expectMDN(t, resp, body, mdn.DispProcessed)

	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 4 {
		t.Fatalf("handler runs %+v", runs)
	}
	if runs[0] != runs[1] || runs[0].msg == "" || runs[0].payload == "" {
		t.Errorf("retransmission after a failure: %+v vs %+v", runs[0], runs[1])
	}
	if runs[2].payload != runs[3].payload || runs[2].msg == runs[3].msg || runs[2].payload == runs[0].payload {
		t.Errorf("interchange under a new Message-ID: %+v vs %+v", runs[2], runs[3])
	}
}
