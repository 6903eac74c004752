package endpoint

import "github.com/edigateway/gateway/internal/xmlenc"

// KeyPair is one of our private keys with its certificate: Config.Keys and
// Identity.Keys decrypt attachments and sign receipts and errors (see
// LoadKeyPair, ParseKeyPair). An alias of the internal XML Encryption
// package's type, so that an embedder can name it.
type KeyPair = xmlenc.KeyPair
