package cms

import (
	"bytes"
	"compress/zlib"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"

	"github.com/edigateway/gateway/internal/limits"
)

// DefaultDecompressLimit is the decompressed size Decompress allows when the
// caller passes a limit <= 0.
const DefaultDecompressLimit = 64 << 20

type compressedData struct {
	Version              int
	CompressionAlgorithm pkix.AlgorithmIdentifier
	EncapContentInfo     encapContentInfo
}

// Compress returns a CompressedData ContentInfo (RFC 3274, zlib; DER)
// holding data.
func Compress(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := zlib.NewWriterLevel(&buf, zlib.DefaultCompression)
	if err != nil {
		return nil, fmt.Errorf("cms: compress: %w", err)
	}
	if _, err := zw.Write(data); err != nil {
		return nil, fmt.Errorf("cms: compress: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("cms: compress: %w", err)
	}
	oct, err := asn1.Marshal(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("cms: compress: %w", err)
	}
	return marshalContentInfo(oidCompressedData, compressedData{
		Version:              0,
		CompressionAlgorithm: pkix.AlgorithmIdentifier{Algorithm: oidZlibCompress},
		EncapContentInfo: encapContentInfo{
			EContentType: oidData,
			EContent:     asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: oct},
		},
	})
}

// Decompress inflates a CompressedData ContentInfo (DER or BER, zlib). It
// stops reading and returns an error wrapping ErrTooLarge as soon as the
// output would exceed limit bytes (limit <= 0 means DefaultDecompressLimit)
// or limits.DefaultMaxCompressionRatio times the compressed size, so a
// small bomb cannot exhaust memory.
func Decompress(in []byte, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultDecompressLimit
	}
	return DecompressLimited(in, limits.Inflation{MaxBytes: limit, MaxRatio: limits.DefaultMaxCompressionRatio}, nil)
}

// DecompressLimited inflates a CompressedData ContentInfo under lim: the
// output is read in fixed-size chunks into a bounded destination (memory,
// then an unlinked spool file) and allocated once at its exact size; past
// lim.MaxBytes, or past lim.MaxRatio times the zlib stream's size once over
// the ratio floor, it stops with an error wrapping ErrTooLarge. check, when
// set, sees the running output size after every chunk (limits across
// nested layers); its error is returned wrapped.
func DecompressLimited(in []byte, lim limits.Inflation, check func(total int64) error) ([]byte, error) {
	oid, content, err := parseContentInfo(in)
	if err != nil {
		return nil, fmt.Errorf("cms: decompress: %w", err)
	}
	if !oid.Equal(oidCompressedData) {
		return nil, fmt.Errorf("cms: decompress: content type %s is not compressed-data: %w", contentTypeName(oid), ErrMalformed)
	}
	var cd compressedData
	if err := unmarshalAll(content, &cd); err != nil {
		return nil, fmt.Errorf("cms: decompress: CompressedData: %w", err)
	}
	if !cd.CompressionAlgorithm.Algorithm.Equal(oidZlibCompress) {
		return nil, fmt.Errorf("cms: decompress: algorithm %s: %w", cd.CompressionAlgorithm.Algorithm, ErrUnsupportedAlgorithm)
	}
	if len(cd.EncapContentInfo.EContent.FullBytes) == 0 {
		return nil, fmt.Errorf("cms: decompress: no content: %w", ErrMalformed)
	}
	var z []byte
	if err := unmarshalAll(cd.EncapContentInfo.EContent.Bytes, &z); err != nil {
		return nil, fmt.Errorf("cms: decompress: eContent: %w", err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("cms: decompress: zlib: %w: %v", ErrMalformed, err)
	}
	defer zr.Close()
	out, err := lim.Inflate(zr, int64(len(z)), check)
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, limits.ErrTooLarge) || errors.Is(err, limits.ErrRatio):
		return nil, fmt.Errorf("cms: decompress: %w: %w", ErrTooLarge, err)
	case errors.Is(err, limits.ErrBusy):
		return nil, fmt.Errorf("cms: decompress: %w", err)
	}
	return nil, fmt.Errorf("cms: decompress: zlib: %w: %v", ErrMalformed, err)
}
