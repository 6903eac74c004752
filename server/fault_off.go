//go:build !gatewayfault

package server

import (
	"net/http"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/outbound"
)

// faultKill is empty in the production build, and every wrap returns what
// it is given: GATEWAY_FAULT_* are not read and the fault code (fault.go)
// is not compiled in. The crash tests build the gateway with -tags
// gatewayfault.
type faultKill struct{}

func (s *Server) injectFaults(handler exchange.Handler) (exchange.Handler, error) {
	return handler, nil
}

func (*faultKill) wrapHandler(h exchange.Handler) exchange.Handler       { return h }
func (*faultKill) wrapTxHandler(h exchange.TxHandler) exchange.TxHandler { return h }
func (*faultKill) wrapHTTP(h http.Handler) http.Handler                  { return h }
func (*faultKill) wrapOutbound(st outbound.Store) outbound.Store         { return st }
