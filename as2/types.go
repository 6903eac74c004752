package as2

import "github.com/edigateway/gateway/internal/cms"

// KeyPair is one of our private keys with its certificate: Config.Keys and
// Identity.Keys decrypt what partners send and sign our MDNs. An alias of the
// internal CMS package's type, so that an embedder can name it
// (as2.KeyPair{Cert: c, Key: k}).
type KeyPair = cms.KeyPair
