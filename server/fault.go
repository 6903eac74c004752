//go:build gatewayfault

package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/outbound"
)

// This build reads GATEWAY_FAULT_*: only a build with the gatewayfault tag
// (the crash tests build the gateway so); the production build has
// fault_off.go instead and no fault code at all.

// Fault injection for crash tests, by environment variable, in a build
// with the gatewayfault tag only:
//
//	GATEWAY_FAULT_KILL=PHASE:N  the process kills itself (SIGKILL on Unix)
//	                            the Nth time a message reaches PHASE:
//	  before   the handler is about to run (for a transactional handler:
//	           inside the accept transaction, after the accept's
//	           compare-and-set);
//	  during   the handler returned success, the accept is not committed;
//	  after    the accept is committed and the reply is about to be sent
//	           (an HTTP 200 answer to a POST).
//	  send-before    sending: the Sender recorded Posting (the transmission
//	                 starts), the message has not left;
//	  send-after     sending: the partner answered (MDN, receipt, or 2xx for
//	                 an asynchronous MDN), the outcome (Delivered,
//	                 Awaiting) is not recorded;
//	  send-awaiting  sending: Awaiting is recorded, the asynchronous MDN
//	                 has not come.
//	GATEWAY_FAULT_JOURNAL=FILE  every successful run of a plain handler
//	                            appends "<payload idempotency key>\n" to FILE
//	                            (synced): a non-idempotent side effect.
//	GATEWAY_FAULT_HANDLER_DELAY=D  a plain handler's side effect is done,
//	                            the accept is not, for the duration D.
type faultKill struct {
	phase string
	n     int64
	seen  atomic.Int64
	log   *slog.Logger
}

// faultPhases are the phases GATEWAY_FAULT_KILL knows.
var faultPhases = map[string]bool{"before": true, "during": true, "after": true,
	"send-before": true, "send-after": true, "send-awaiting": true}

func newFaultKill(log *slog.Logger) *faultKill {
	v := os.Getenv("GATEWAY_FAULT_KILL")
	if v == "" {
		return nil
	}
	phase, n, _ := strings.Cut(v, ":")
	count, err := strconv.ParseInt(n, 10, 64)
	if err != nil || count < 1 || !faultPhases[phase] {
		log.Error("fault injection: ignoring malformed GATEWAY_FAULT_KILL", "value", v)
		return nil
	}
	log.Warn("fault injection: the process kills itself", "phase", phase, "at", count)
	return &faultKill{phase: phase, n: count, log: log}
}

// at kills the process when phase is its phase reached for the nth time.
func (f *faultKill) at(phase string) {
	if f == nil || phase != f.phase || f.seen.Add(1) != f.n {
		return
	}
	f.log.Warn("fault injection: kill -9", "phase", phase)
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		f.log.Error("fault injection: kill failed; exiting", "err", err)
		os.Exit(137)
	}
	select {} // the signal is on its way
}

func (f *faultKill) wrapHandler(h exchange.Handler) exchange.Handler {
	if f == nil {
		return h
	}
	return exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		f.at("before")
		if err := h.Handle(ctx, m); err != nil {
			return err
		}
		f.at("during")
		return nil
	})
}

func (f *faultKill) wrapTxHandler(h exchange.TxHandler) exchange.TxHandler {
	if f == nil {
		return h
	}
	return exchange.TxHandlerFunc(func(ctx context.Context, tx exchange.Tx, m *exchange.Message) error {
		f.at("before")
		if err := h.HandleTx(ctx, tx, m); err != nil {
			return err
		}
		f.at("during")
		return nil
	})
}

func (f *faultKill) wrapHTTP(h http.Handler) http.Handler {
	if f == nil || f.phase != "after" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&killBeforeOK{ResponseWriter: w, f: f}, r)
	})
}

type killBeforeOK struct {
	http.ResponseWriter
	f    *faultKill
	once sync.Once
}

func (k *killBeforeOK) WriteHeader(code int) {
	k.once.Do(func() {
		if code == http.StatusOK {
			k.f.at("after")
		}
	})
	k.ResponseWriter.WriteHeader(code)
}

func (k *killBeforeOK) Write(b []byte) (int, error) {
	k.once.Do(func() { k.f.at("after") })
	return k.ResponseWriter.Write(b)
}

// wrapOutbound is the Sender's queue with the send-* kill points: after
// Posting (send-before), before Delivered and Awaiting (send-after), and
// after Awaiting (send-awaiting).
func (f *faultKill) wrapOutbound(st outbound.Store) outbound.Store {
	if f == nil || !strings.HasPrefix(f.phase, "send-") {
		return st
	}
	return faultOutbound{Store: st, f: f}
}

type faultOutbound struct {
	outbound.Store
	f *faultKill
}

func (s faultOutbound) Posting(ctx context.Context, id, token, digest string) error {
	if err := s.Store.Posting(ctx, id, token, digest); err != nil {
		return err
	}
	s.f.at("send-before")
	return nil
}

func (s faultOutbound) Delivered(ctx context.Context, id, token string, ev *outbound.Evidence) error {
	s.f.at("send-after")
	return s.Store.Delivered(ctx, id, token, ev)
}

func (s faultOutbound) Awaiting(ctx context.Context, id, token string, deadline time.Time) error {
	s.f.at("send-after")
	if err := s.Store.Awaiting(ctx, id, token, deadline); err != nil {
		return err
	}
	s.f.at("send-awaiting")
	return nil
}

// journalHandler appends each payload's idempotency key to a file after h
// succeeded (GATEWAY_FAULT_JOURNAL).
func journalHandler(path string, h exchange.Handler) (exchange.Handler, func() error, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, nil, fmt.Errorf("server: fault journal: %w", err)
	}
	var mu sync.Mutex
	return exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		if err := h.Handle(ctx, m); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, p := range m.Payloads {
			if _, err := f.WriteString(p.IdempotencyKey + "\n"); err != nil {
				return err
			}
		}
		return f.Sync()
	}), f.Close, nil
}

// injectFaults wraps the plain handler as GATEWAY_FAULT_HANDLER_DELAY and
// GATEWAY_FAULT_JOURNAL ask and sets up GATEWAY_FAULT_KILL (s.fault).
func (s *Server) injectFaults(handler exchange.Handler) (exchange.Handler, error) {
	log := s.Log
	log.Warn("fault injection compiled in (gatewayfault build): not a production build")
	if d, err := time.ParseDuration(os.Getenv("GATEWAY_FAULT_HANDLER_DELAY")); err == nil && d > 0 && handler != nil {
		log.Warn("fault injection: handler delay after side effect", "delay", d)
		inner := handler
		handler = exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
			if err := inner.Handle(ctx, m); err != nil {
				return err
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			return nil
		})
	}
	if path := os.Getenv("GATEWAY_FAULT_JOURNAL"); path != "" && handler != nil {
		h, closeJournal, err := journalHandler(path, handler)
		if err != nil {
			return nil, err
		}
		log.Warn("fault injection: plain handler journal", "file", path)
		s.closers = append(s.closers, closeJournal)
		handler = h
	}
	s.fault = newFaultKill(log)
	return handler, nil
}
