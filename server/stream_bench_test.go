package server

import (
	"bytes"
	"compress/zlib"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/cms"
)

// TestStreamThroughputReport (GATEWAY_STREAMBENCH=1, scripts/streambench.sh)
// prints, for AS2 messages of 10 MB, 100 MB and 1 GB (payload signed, then
// compressed, then AES-256-GCM encrypted; sync signed MDN) and AS4
// messages of the same sizes (payload gzipped, signed, AES-128-GCM
// encrypted; signed receipt), the gateway's
// throughput through the real server over loopback (the body sent from a
// file written beforehand, so that the sender's work is not timed), the
// peak heap and RSS growth, and the ratio to what SHA-256 + AES-GCM + zlib
// inflate alone need for the same bytes, measured in the same run on a
// 64 MiB sample of the same data.
func TestStreamThroughputReport(t *testing.T) {
	if os.Getenv("GATEWAY_STREAMBENCH") == "" {
		t.Skip("set GATEWAY_STREAMBENCH=1")
	}
	// The raw rates are measured before and after the runs; the faster of
	// each is used (the machine may be shared: the conservative ratio), so
	// the table is printed at the end.
	shaRate, aesRate, inflRate, ratio := rawRates(t)
	var rows []benchResult
	defer func() {
		s2, a2, i2, _ := rawRates(t)
		fmt.Printf("raw before the runs: SHA-256 %.0f MB/s, AES-256-GCM %.0f MB/s, zlib inflate %.0f MB/s (output), compression %.2f:1\n",
			shaRate/1e6, aesRate/1e6, inflRate/1e6, ratio)
		fmt.Printf("raw after the runs: SHA-256 %.0f MB/s, AES-256-GCM %.0f MB/s, zlib inflate %.0f MB/s\n", s2/1e6, a2/1e6, i2/1e6)
		sha, aes, infl := max(shaRate, s2), max(aesRate, a2), max(inflRate, i2)
		fmt.Println("| protocol | payload | body | time | MB/s (payload) | peak heap | peak RSS | raw SHA-256+AES-GCM+inflate MB/s | ratio |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|")
		for _, r := range rows {
			rate := float64(r.size) / r.took.Seconds()
			raw := float64(r.size) / (float64(r.hashed)/sha + float64(r.bodyLen)/aes + float64(r.size)/infl)
			fmt.Printf("| %s | %d MB | %d MB | %s | %.0f | +%d MiB | +%d MiB | %.0f | %.0f %% |\n",
				r.protocol, r.size/1e6, r.bodyLen/1e6, r.took.Round(10*time.Millisecond), rate/1e6, r.heap>>20, r.rss>>20, raw/1e6, 100*rate/raw)
		}
	}()
	url := memoryServerWith(t, nil, drainPayload(new(int64), nil))
	for i, size := range benchSizes() {
		if !benchProtocol("AS2") {
			break
		}
		body, header, mic := writeAS2Body(t, size, fmt.Sprintf("bench-%d@demo", i))
		st, _ := os.Stat(body)
		// AS2 hashes the payload (signed before compression).
		rows = append(rows, benchRun(t, benchResult{protocol: "AS2", size: size, bodyLen: st.Size(), hashed: size}, body, func(f *os.File) error {
			req, _ := http.NewRequest(http.MethodPost, url+"/as2", f)
			req.Header, req.ContentLength = header, st.Size()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), mic) || strings.Contains(string(b), "processed/error") {
				return fmt.Errorf("HTTP %d %.300q", resp.StatusCode, b)
			}
			return nil
		}))
	}
	// AS4: the payload gzipped (level 1), signed, AES-128-GCM encrypted;
	// the gateway decrypts, digests (SHA-256 of the compressed attachment)
	// and gunzips it.
	for i, size := range benchSizes() {
		if !benchProtocol("AS4") {
			break
		}
		m := newAS4Streamed(t, size, uint64(size), fmt.Sprintf("bench-as4-%d@demo", i))
		body := filepath.Join(t.TempDir(), "as4-body")
		f, err := os.Create(body)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(f, m.body)
		if err == nil {
			// On disk before the timed run: its writeback is the set-up's work.
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		// AS4 hashes the compressed attachment (signed after compression).
		rows = append(rows, benchRun(t, benchResult{protocol: "AS4", size: size, bodyLen: n, hashed: n}, body,
			func(f *os.File) error { return m.post(url, f, n) }))
	}
}

// benchResult is one row of the throughput table: the bytes the raw bound
// hashes, decrypts (the body) and inflates to (the payload), and what the
// gateway took.
type benchResult struct {
	protocol      string
	size, bodyLen int64
	hashed        int64
	took          time.Duration
	heap, rss     uint64
}

// benchRun times post of the body file under the memory probe and removes
// the file.
func benchRun(t *testing.T, r benchResult, body string, post func(f *os.File) error) benchResult {
	t.Helper()
	var rows []string
	r.heap, r.rss = measuredGrowth(t, &rows, func() error {
		f, err := os.Open(body)
		if err != nil {
			return err
		}
		defer f.Close()
		// GATEWAY_STREAMBENCH_CPUPROFILE=DIR and GATEWAY_STREAMBENCH_TRACE=DIR
		// profile or trace each timed run alone (the set-up's compression
		// and signing are left out).
		name := fmt.Sprintf("%s-%dMB", strings.ToLower(r.protocol), r.size/1e6)
		for _, rec := range []struct {
			env, ext string
			start    func(io.Writer) error
			stop     func()
		}{
			{"GATEWAY_STREAMBENCH_CPUPROFILE", ".prof", pprof.StartCPUProfile, pprof.StopCPUProfile},
			{"GATEWAY_STREAMBENCH_TRACE", ".trace", trace.Start, trace.Stop},
		} {
			dir := os.Getenv(rec.env)
			if dir == "" {
				continue
			}
			out, err := os.Create(filepath.Join(dir, name+rec.ext))
			if err != nil {
				return err
			}
			defer out.Close()
			if err := rec.start(out); err != nil {
				return err
			}
			defer rec.stop()
		}
		start := time.Now()
		err = post(f)
		r.took = time.Since(start)
		return err
	})
	os.Remove(body)
	return r
}

// measuredGrowth runs f under the memory probe and returns the peak growth.
func measuredGrowth(t *testing.T, rows *[]string, f func() error) (heap, rss uint64) {
	t.Helper()
	p := startProbe()
	err := f()
	heap, rss = p.end()
	if err != nil {
		t.Fatal(err)
	}
	return heap, rss
}

// rawRates measures SHA-256, AES-256-GCM and zlib inflate (per output
// byte) on 64 MiB of the benchmark's data, and its compression ratio.
func rawRates(t *testing.T) (sha, gcm, inflate, ratio float64) {
	const n = 64 << 20
	data, _ := io.ReadAll(textReader{newPRNG(1, n)})
	start := time.Now()
	sha256.Sum256(data)
	sha = n / time.Since(start).Seconds()
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, 1)
	zw.Write(data)
	zw.Close()
	ratio = float64(n) / float64(z.Len())
	block, _ := aes.NewCipher(make([]byte, 32))
	aead, _ := cipher.NewGCM(block)
	sealed := aead.Seal(nil, make([]byte, 12), z.Bytes(), nil)
	start = time.Now()
	if _, err := aead.Open(sealed[:0], make([]byte, 12), sealed, nil); err != nil {
		t.Fatal(err)
	}
	gcm = float64(z.Len()) / time.Since(start).Seconds()
	start = time.Now()
	zr, _ := zlib.NewReader(bytes.NewReader(z.Bytes()))
	io.Copy(io.Discard, zr)
	inflate = n / time.Since(start).Seconds()
	return sha, gcm, inflate, ratio
}

// writeAS2Body writes an AS2 body to a file: a payload of size bytes of
// seeded PRNG text, signed, compressed (zlib level 1) and AES-256-GCM
// encrypted as streams; it returns the file, the request header and the
// MIC the MDN must carry.
func writeAS2Body(t *testing.T, size int64, id string) (string, http.Header, string) {
	t.Helper()
	partner, gw := demoAS2KeyPairs(t)
	const boundary = "----=_gateway_bench_5eed"
	head := "Content-Type: application/edi-consent\r\nContent-Transfer-Encoding: binary\r\n\r\n"
	h := sha256.New()
	io.WriteString(h, head)
	io.Copy(h, textReader{newPRNG(uint64(size), size)})
	digest := h.Sum(nil)
	sig, err := cms.Sign(nil, partner.Cert, partner.Key, cms.SignOptions{Digest: "sha256", ContentDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "body")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc, err := cms.EncryptStream(f, []*x509.Certificate{gw.Cert}, "aes256-gcm", false)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(enc, "Content-Type: application/pkcs7-mime; smime-type=compressed-data\r\nContent-Transfer-Encoding: binary\r\n\r\n")
	z, _ := cms.CompressStreamLevel(enc, 1)
	io.WriteString(z, "Content-Type: multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha-256; boundary=\""+boundary+"\"\r\n\r\n--"+boundary+"\r\n"+head)
	io.Copy(z, textReader{newPRNG(uint64(size), size)})
	io.WriteString(z, "\r\n--"+boundary+"\r\nContent-Type: application/pkcs7-signature\r\nContent-Transfer-Encoding: base64\r\n\r\n"+
		base64.StdEncoding.EncodeToString(sig)+"\r\n--"+boundary+"--\r\n")
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	// On disk before the timed run: its writeback is the set-up's work.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	hd := http.Header{}
	for k, v := range map[string]string{"AS2-From": "DEMO", "AS2-To": "GATEWAY", "AS2-Version": "1.2",
		"Message-Id": "<" + id + ">", "Disposition-Notification-To": "mdn@demo",
		"Disposition-Notification-Options": "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256",
		"Content-Type":                     "application/pkcs7-mime; smime-type=enveloped-data; name=smime.p7m"} {
		hd.Set(k, v)
	}
	return path, hd, base64.StdEncoding.EncodeToString(digest)
}

// benchSizes are the payload sizes of the report: 10 MB, 100 MB and 1 GB,
// or those GATEWAY_STREAMBENCH_SIZES lists (MB, comma-separated).
func benchSizes() []int64 {
	v := os.Getenv("GATEWAY_STREAMBENCH_SIZES")
	if v == "" {
		return []int64{10e6, 100e6, 1e9}
	}
	var sizes []int64
	for _, f := range strings.Split(v, ",") {
		if mb, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil && mb > 0 {
			sizes = append(sizes, mb*1e6)
		}
	}
	return sizes
}

// benchProtocol reports whether the report runs protocol: both, or the one
// GATEWAY_STREAMBENCH_PROTOCOLS names (as2, as4).
func benchProtocol(protocol string) bool {
	v := os.Getenv("GATEWAY_STREAMBENCH_PROTOCOLS")
	return v == "" || strings.Contains(strings.ToLower(v), strings.ToLower(protocol))
}
