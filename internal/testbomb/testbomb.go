// Package testbomb builds decompression bombs for tests: zlib and gzip
// streams of n zero bytes made without compressing n bytes (a deflate
// segment that repeats the window is concatenated), and CompressedData
// (RFC 3274) layers around them, nested as a hostile AS2 sender would.
package testbomb

import (
	"bytes"
	"compress/flate"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"hash/adler32"
	"hash/crc32"
)

const segment = 1 << 20 // zero bytes per repeated deflate segment

// deflateZeros returns a raw deflate stream (final block included) that
// inflates to n zero bytes, n rounded up to a multiple of 1 MiB.
func deflateZeros(n int64) ([]byte, int64) {
	zeros := make([]byte, segment)
	var out bytes.Buffer
	// First segment: nothing in the window yet.
	w, _ := flate.NewWriter(&out, flate.BestCompression)
	w.Write(zeros)
	w.Flush()
	// Repeated segment: every back-reference stays within zeros already out.
	var rep bytes.Buffer
	wd, _ := flate.NewWriterDict(&rep, flate.BestCompression, zeros[:32<<10])
	wd.Write(zeros)
	wd.Flush()
	total := int64(segment)
	for ; total < n; total += segment {
		out.Write(rep.Bytes())
	}
	out.Write([]byte{0x03, 0x00}) // empty final block (fixed Huffman)
	return out.Bytes(), total
}

// Zlib returns a zlib stream (RFC 1950) of n zero bytes (rounded up to
// MiB) with a correct Adler-32.
func Zlib(n int64) []byte {
	d, total := deflateZeros(n)
	out := append([]byte{0x78, 0xda}, d...)
	adler := uint32(total%65521)<<16 | 1 // a stays 1 over zeros, b adds it n times
	return binary.BigEndian.AppendUint32(out, adler)
}

// Gzip returns a gzip stream (RFC 1952) of n zero bytes (rounded up to
// MiB) with a correct CRC-32 and size.
func Gzip(n int64) []byte {
	d, total := deflateZeros(n)
	out := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255}
	out = append(out, d...)
	crc := uint32(0)
	zeros := make([]byte, segment)
	for i := int64(0); i < total; i += segment {
		crc = crc32.Update(crc, crc32.IEEETable, zeros)
	}
	out = binary.LittleEndian.AppendUint32(out, crc)
	return binary.LittleEndian.AppendUint32(out, uint32(total))
}

var (
	oidData           = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidCompressedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 1, 9}
	oidZlib           = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 3, 8}
)

// CompressedData returns a DER ContentInfo holding a CompressedData whose
// eContent is the zlib stream z.
func CompressedData(z []byte) []byte {
	oct, _ := asn1.Marshal(z)
	type encap struct {
		EContentType asn1.ObjectIdentifier
		EContent     asn1.RawValue
	}
	type compressed struct {
		Version   int
		Algorithm pkix.AlgorithmIdentifier
		Encap     encap
	}
	cd, _ := asn1.Marshal(compressed{Algorithm: pkix.AlgorithmIdentifier{Algorithm: oidZlib},
		Encap: encap{EContentType: oidData, EContent: asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: oct}}})
	ci, _ := asn1.Marshal(struct {
		ContentType asn1.ObjectIdentifier
		Content     asn1.RawValue
	}{oidCompressedData, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: cd}})
	return ci
}

// ContentType is the Content-Type of an AS2 body that is a CompressedData.
const ContentType = `application/pkcs7-mime; smime-type=compressed-data; name="smime.p7z"`

// NestedAS2 returns an AS2 request body (binary CompressedData, Content-Type
// ContentType) of two compressed layers: the outer one inflates to a MIME
// entity holding the inner one, which inflates to inner zero bytes. With
// inner = 4 GiB the body is a few KiB.
func NestedAS2(inner int64) []byte {
	entity := append([]byte("Content-Type: "+ContentType+"\r\nContent-Transfer-Encoding: binary\r\n\r\n"), CompressedData(Zlib(inner))...)
	var z bytes.Buffer
	w, _ := flate.NewWriter(&z, flate.BestCompression)
	w.Write(entity)
	w.Close()
	zl := append([]byte{0x78, 0xda}, z.Bytes()...)
	zl = binary.BigEndian.AppendUint32(zl, adler32.Checksum(entity))
	return CompressedData(zl)
}
