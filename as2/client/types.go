package client

import "github.com/edigateway/gateway/internal/smime"

// Compression selects whether and where the message is compressed
// (RFC 5402; Config.Compression).
type Compression = smime.Compression

// The compression choices.
const (
	// NoCompression sends the payload uncompressed (the default).
	NoCompression = smime.NoCompression
	// CompressThenSign compresses the payload and signs the compressed
	// entity (the MIC covers the compressed entity).
	CompressThenSign = smime.CompressThenSign
	// SignThenCompress compresses the multipart/signed entity.
	SignThenCompress = smime.SignThenCompress
)
