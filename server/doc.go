// Package server wires the gateway together: configuration, store, partner
// directory, business handler, the exchange pipeline and the protocols' HTTP
// endpoints. It is the only package that knows every layer.
//
// It is also the API for a program that embeds the gateway instead of
// running the gateway command:
//
//   - New opens the store named by the configuration (memory:, sqlite: or
//     postgres://), loads the partner directory and our identity keys, and
//     builds the handler the configuration names; Close releases them.
//   - SetHandler replaces that handler with the program's own
//     exchange.Handler, the business plug-in that receives each verified
//     AS2 or AS4 message; SetTxHandler installs an exchange.TxHandler that
//     writes in the transaction accepting the message instead.
//   - ServeListeners serves the partner endpoints (AS2 at as2.path, AS4 at
//     as4.path) and the admin endpoints (/healthz, /readyz, /metrics, the
//     console) on listeners the program opens, until its context is
//     cancelled, and then shuts down gracefully; Serve opens the admin
//     listener at admin.listen itself. A program with its own HTTP server
//     mounts PartnerHandler and AdminHandler instead.
//   - Reload and ReloadOnSignal re-read the partner directory and identity
//     keys without a restart; Directory and Current are what is in force.
//
// Examples: Example_embeddingServeAndShutDown (a complete run on loopback),
// Example_embedding and Example_transactionalHandler.
package server
