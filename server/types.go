package server

import (
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/internal/console"
)

// Certificate is one certificate the gateway uses (a partner's or one of our
// identities'), with the file and configuration field it comes from
// (Snapshot.Certificates).
type Certificate = certs.Cert

// QuarantineItem is one quarantined payload or message, as the console
// lists it (ReleaseQuarantined).
type QuarantineItem = console.QuarantineItem

// ReleaseResult is what ReleaseQuarantined did.
type ReleaseResult = console.ReleaseResult
