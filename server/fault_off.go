//go:build !gatewayfault

package server

import (
	"net/http"

	"github.com/edigateway/gateway/exchange"
)

// faultInjection is false in the production build: GATEWAY_FAULT_* are not
// read, and the fault code (fault.go) is not compiled in. The crash tests
// build the gateway with -tags gatewayfault.
const faultInjection = false

// faultKill is empty here: every wrap returns what it is given.
type faultKill struct{}

func (s *Server) injectFaults(handler exchange.Handler) (exchange.Handler, error) {
	return handler, nil
}

func (*faultKill) wrapHandler(h exchange.Handler) exchange.Handler       { return h }
func (*faultKill) wrapTxHandler(h exchange.TxHandler) exchange.TxHandler { return h }
func (*faultKill) wrapHTTP(h http.Handler) http.Handler                  { return h }
