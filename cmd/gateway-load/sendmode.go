package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sendSummary is the result of -mode send: messages submitted through the
// sending gateway's API and how long until every one was final.
type sendSummary struct {
	protocol            string
	n, failed, notFinal int
	submitted, elapsed  time.Duration
	// senderCPU and receiverCPU are the gateways' CPU time over the run
	// (-1: not measured).
	senderCPU, receiverCPU time.Duration
}

func (s *sendSummary) String() string {
	rate := func(d time.Duration) float64 { return float64(s.n) / d.Seconds() }
	perMsg := func(d time.Duration) string {
		if d < 0 {
			return "n/a"
		}
		return ms(d / time.Duration(s.n))
	}
	return fmt.Sprintf("send %s: %d msgs, submitted in %s (%.1f msgs/s), all final in %s: sent %.1f msgs/s; failed %d, not final %d; sending gateway CPU %s/msg, receiving gateway CPU %s/msg",
		s.protocol, s.n, s.submitted.Round(time.Millisecond), rate(s.submitted), s.elapsed.Round(time.Millisecond), rate(s.elapsed),
		s.failed, s.notFinal, perMsg(s.senderCPU), perMsg(s.receiverCPU))
}

// submitted is the part of the submission API's answers -mode send reads.
type submitted struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Final bool   `json:"final"`
}

// sendRun is one -mode send run against a sending gateway's admin API.
type sendRun struct {
	o     *options
	hc    *http.Client
	token string
}

func (r *sendRun) do(ctx context.Context, method, u string, hdr http.Header, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return b, resp.StatusCode, err
}

// cpu reads a gateway's CPU time, -1 when metricsURL is empty.
func (r *sendRun) cpu(ctx context.Context, metricsURL string) (time.Duration, error) {
	if metricsURL == "" {
		return -1, nil
	}
	return gatewayCPU(ctx, r.hc, metricsURL)
}

// sendLoad submits o.n messages for o.partner through the sending
// gateway's submission API (o.c at a time, each under its own
// Idempotency-Key) and polls their status until every one is final.
func sendLoad(ctx context.Context, o *options, progress io.Writer) (*sendSummary, error) {
	r := &sendRun{o: o, hc: &http.Client{Timeout: o.requestTimeout}, token: os.Getenv("GATEWAY_ADMIN_TOKEN")}
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("gateway-load: -token-file: %w", err)
		}
		r.token = strings.TrimSpace(string(b))
	}
	run, err := runID()
	if err != nil {
		return nil, err
	}
	payloads := make([][]byte, o.n)
	for i := range payloads {
		payloads[i] = interchange(o.unbSender, o.unbRecipient, reference(run, i), o.size)
	}
	s := &sendSummary{protocol: o.protocol, n: o.n}
	cpu0, err := r.cpu(ctx, o.metricsURL)
	if err != nil {
		return nil, err
	}
	rcpu0, err := r.cpu(ctx, o.recvMetricsURL)
	if err != nil {
		return nil, fmt.Errorf("-recv-metrics: %w", err)
	}
	fmt.Fprintf(progress, "gateway-load: submitting %d %s messages for partner %s through %s\n", o.n, o.protocol, o.partner, o.submitURL)
	start := time.Now()
	ids, err := r.submitAll(ctx, run, payloads)
	if err != nil {
		return nil, err
	}
	s.submitted = time.Since(start)
	s.failed, s.notFinal = r.waitFinal(ctx, ids)
	s.elapsed = time.Since(start)
	if s.senderCPU, err = r.cpu(ctx, o.metricsURL); err != nil {
		return nil, err
	}
	if s.receiverCPU, err = r.cpu(ctx, o.recvMetricsURL); err != nil {
		return nil, fmt.Errorf("-recv-metrics: %w", err)
	}
	if s.senderCPU >= 0 {
		s.senderCPU -= cpu0
	}
	if s.receiverCPU >= 0 {
		s.receiverCPU -= rcpu0
	}
	return s, nil
}

// submitAll POSTs every payload (o.c at a time) and returns the message ids.
func (r *sendRun) submitAll(ctx context.Context, run string, payloads [][]byte) ([]string, error) {
	o := r.o
	q := url.Values{"partner": {o.partner}, "protocol": {o.protocol}}
	u := strings.TrimRight(o.submitURL, "/") + "/api/v1/outbound/messages?" + q.Encode()
	ids := make([]string, len(payloads))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, o.c)
	for range o.c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(payloads) && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				hdr := http.Header{"Idempotency-Key": {fmt.Sprintf("load-%s-%d", run, i)}, "Content-Type": {"application/edifact"}}
				body, code, err := r.do(ctx, http.MethodPost, u, hdr, payloads[i])
				var m submitted
				if err == nil && code != http.StatusAccepted {
					err = fmt.Errorf("HTTP %d: %s", code, bytes.TrimSpace(body))
				}
				if err == nil {
					err = json.Unmarshal(body, &m)
				}
				if err != nil {
					errs <- fmt.Errorf("gateway-load: submitting message %d: %w", i, err)
					return
				}
				ids[i] = m.ID
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return ids, ctx.Err()
}

// waitFinal polls the status of the messages in the order they were
// submitted, which is about the order they end in: each round reads the
// pending ones until the first not final and then waits 50 ms, so that
// the polling costs the measured gateway about one request per message.
// It counts those not delivered and those never final (ctx ended).
func (r *sendRun) waitFinal(ctx context.Context, ids []string) (failed, notFinal int) {
	base := strings.TrimRight(r.o.submitURL, "/") + "/api/v1/outbound/messages/"
	pending := ids
	for len(pending) > 0 && ctx.Err() == nil {
		body, code, err := r.do(ctx, http.MethodGet, base+url.PathEscape(pending[0]), nil, nil)
		var m submitted
		if err == nil && code == http.StatusOK && json.Unmarshal(body, &m) == nil && m.Final {
			if m.State != "delivered" {
				failed++
			}
			pending = pending[1:]
			continue
		}
		// Not final yet (or the status could not be read): move it to the
		// end, so that one slow message does not hide the others, and wait.
		pending = append(pending[1:], pending[0])
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return failed, len(pending)
}

// errSendFailures: some message of -mode send was not delivered.
var errSendFailures = errors.New("gateway-load: some submitted messages were not delivered")
