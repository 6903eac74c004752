package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
)

// Sizes of the load test's AS2 exchange (10 KB EDIFACT payload, signed and
// encrypted: about 14 KB on the wire; a signed MDN of about 3 KB).
const (
	floorPayload  = 10240
	floorRequest  = 14 << 10
	floorAnswer   = 3 << 10
	floorRecord   = 400 // one audit record or store row as a line
	floorSenders  = 8   // scripts/load.sh's concurrency
	floorBatchCap = floorSenders
)

// BenchmarkFloorAS2 measures, in this process's CPU time (user + system),
// what any receiving gateway that keeps the load test's promises must spend
// per AS2 message beside its two RSA private-key operations, and the ratio
// to the Go-RSA bound that this leaves with every core busy:
//
//	go test ./cmd/gateway-load -run '^$' -bench FloorAS2 -benchtime 2000x
//
// Per message: the two private-key operations (key transport, MDN
// signature); two RSA-2048 signature verifications (the gateway checks the
// partner's signature, the sender checks the MDN's); one HTTP/1.1 exchange
// over loopback with 8 senders, client and server both in this process, no
// work in the handler; the `dir` handler's durable write of the payload and
// its sidecar (inbox.Dir, the gateway's own code: two files written,
// synced and linked, the directory synced); and one fsynced append of a
// record, counted as shared by 8 messages (a group commit of every sender's
// message). Nothing of S/MIME parsing, decryption, digests, the store's
// statements, the ledger or the audit trail is counted. floor-ratio =
// 2 × sign ÷ (sum), the bound's own cost per message over this floor:
// a gateway doing nothing else would reach it with every core busy, a
// real one stays below it.
func BenchmarkFloorAS2(b *testing.B) {
	key, err := readRSAKey(filepath.Join(demoDir(b), "keys", "gateway.key"))
	if err != nil {
		b.Fatal(err)
	}
	n := b.N
	sign := cpuPer(n, func(int) {
		digest := sha256.Sum256([]byte("floor"))
		if _, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:]); err != nil {
			b.Fatal(err)
		}
	})
	digest := sha256.Sum256([]byte("floor"))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		b.Fatal(err)
	}
	verify := cpuPer(n, func(int) {
		if err := rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
			b.Fatal(err)
		}
	})
	exchangeCPU := floorHTTP(b, n)
	inboxCPU := floorInbox(b, n)
	appendCPU := floorAppend(b, n)

	perMessage := 2*sign + 2*verify + exchangeCPU + inboxCPU + appendCPU/floorBatchCap
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(sign), "rsa-sign-cpu-µs")
	b.ReportMetric(us(verify), "rsa-verify-cpu-µs")
	b.ReportMetric(us(exchangeCPU), "http-exchange-cpu-µs")
	b.ReportMetric(us(inboxCPU), "inbox-dir-cpu-µs")
	b.ReportMetric(us(appendCPU), "fsynced-append-cpu-µs")
	b.ReportMetric(us(perMessage), "floor-cpu-µs/msg")
	b.ReportMetric(float64(2*sign)/float64(perMessage), "floor-ratio")
}

// cpuPer runs op n times and returns this process's CPU time per run.
func cpuPer(n int, op func(i int)) time.Duration {
	c0, ok := processCPU()
	for i := range n {
		op(i)
	}
	c1, _ := processCPU()
	if !ok {
		return 0
	}
	return (c1 - c0) / time.Duration(n)
}

// floorHTTP is the CPU time of one bare HTTP/1.1 exchange on loopback
// (floorSenders keep-alive connections), client and server.
func floorHTTP(b *testing.B, n int) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	answer := bytes.Repeat([]byte("m"), floorAnswer)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(answer)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: floorSenders}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	url := "http://" + ln.Addr().String() + "/as2"
	body := bytes.Repeat([]byte("b"), floorRequest)
	post := func() error {
		resp, err := hc.Post(url, "application/pkcs7-mime", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
	// Open the connections before measuring.
	for range floorSenders {
		if err := post(); err != nil {
			b.Fatal(err)
		}
	}
	jobs := make(chan int)
	errs := make(chan error, floorSenders)
	var wg sync.WaitGroup
	c0, _ := processCPU()
	for range floorSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if err := post(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	c1, _ := processCPU()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	return (c1 - c0) / time.Duration(n)
}

// floorInbox is the CPU time of the `dir` handler's durable write of one
// 10 KB payload and its sidecar (the gateway's own inbox.Dir).
func floorInbox(b *testing.B, n int) time.Duration {
	root := b.TempDir()
	body := bytes.Repeat([]byte("X"), floorPayload)
	sum := sha256.Sum256(body)
	msgs := make([]*exchange.Message, n)
	for i := range msgs {
		id := fmt.Sprintf("floor-%d@gateway-load", i)
		msgs[i] = &exchange.Message{Partner: "floor", Protocol: exchange.AS2, MessageID: id,
			TransportKey: dedup.TransportKey("as2", "as2", "FLOOR", id), Received: time.Now(),
			Payloads: []exchange.Payload{exchange.NewPayload(exchange.Payload{ContentType: "application/edifact",
				SHA256: hex.EncodeToString(sum[:])}, exchange.MemoryBody(body))}}
	}
	h := inbox.Dir{Root: root}
	ctx := context.Background()
	return cpuPer(n, func(i int) {
		if err := h.Handle(ctx, msgs[i]); err != nil {
			b.Fatal(err)
		}
	})
}

// floorAppend is the CPU time of appending one record to a file and
// syncing it.
func floorAppend(b *testing.B, n int) time.Duration {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "records"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rec := append(bytes.Repeat([]byte("r"), floorRecord-1), '\n')
	return cpuPer(n, func(int) {
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	})
}
