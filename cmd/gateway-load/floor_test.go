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
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/store/sqlitestore"
)

// Sizes of the load test's AS2 exchange (10 KB EDIFACT payload, signed and
// encrypted: about 14 KB on the wire; a signed MDN of about 3 KB).
const (
	floorPayload = 10240
	floorRequest = 14 << 10
	floorAnswer  = 3 << 10
	floorRecord  = 400 // one audit record or store row as a line
	floorSenders = 8   // scripts/load.sh's concurrency; also the messages one group commit covers
)

// BenchmarkFloor measures, in this process's CPU time (user + system),
// what any receiving gateway that keeps the load test's promises must spend
// per message beside its two RSA private-key operations, and the ratio to
// the Go-RSA bound that this leaves with every core busy:
//
//	go test ./cmd/gateway-load -run '^$' -bench Floor -benchtime 2000x
//
// Per AS2 message: the two private-key operations (key transport, MDN
// signature); two RSA-2048 signature verifications (the gateway checks the
// partner's signature, the sender checks the MDN's); one HTTP/1.1 exchange
// of 14 KB and 3 KB over loopback with 8 senders, client and server both in
// this process, no work in the handler; the `dir` handler's durable write
// of the payload and its sidecar (inbox.Dir, the gateway's own code: two
// files written, synced and linked, the directory synced); and one fsynced
// append of a record, counted as shared by 8 messages (a group commit of
// every sender's message). Nothing of S/MIME parsing, decryption, digests,
// the store's statements, the ledger or the audit trail is counted. AS4
// adds the one piece that no AS4 gateway with this project's XML library
// can skip: parsing the SOAP envelope of a load-test message (signed,
// encrypted, gzip-compressed 10 KB attachment; gateway-load's own builder)
// once with beevik/etree; nothing of WS-Security (canonicalization,
// digests), XML Encryption, AES-GCM, gunzip or the receipt is counted.
// floor-ratio = 2 × sign ÷ floor: a gateway doing nothing else would reach
// it with every core busy, a real one stays below it.
//
// One benchmark measures both, so that the inbox's files are removed once
// at the end: on a file system that skips recently deleted inodes (this
// machine's ext4 without a journal, README Performance) files created just
// after thousands were deleted cost twice as much.
func BenchmarkFloor(b *testing.B) {
	envelope := floorAS4Envelope(b)
	f := measureFloor(b, b.N)
	parse := cpuPer(b.N, func(int) {
		doc := etree.NewDocument()
		if err := doc.ReadFromBytes(envelope); err != nil || doc.Root() == nil {
			b.Fatalf("envelope: %v", err)
		}
	})
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(f.sign), "rsa-sign-cpu-µs")
	b.ReportMetric(us(f.verify), "rsa-verify-cpu-µs")
	b.ReportMetric(us(f.exchange), "http-exchange-cpu-µs")
	b.ReportMetric(us(f.inbox), "inbox-dir-cpu-µs")
	b.ReportMetric(us(f.append), "fsynced-append-cpu-µs")
	b.ReportMetric(us(parse), "as4-envelope-parse-cpu-µs")
	b.ReportMetric(us(f.store), "sqlite-exchange-cpu-µs")
	as2 := 2*f.sign + 2*f.verify + f.exchange + f.inbox + f.append/floorSenders
	as4 := as2 + parse
	b.ReportMetric(us(as2), "as2-floor-cpu-µs/msg")
	b.ReportMetric(float64(2*f.sign)/float64(as2), "as2-floor-ratio")
	b.ReportMetric(float64(2*f.sign)/float64(as4), "as4-floor-ratio")
	// With the embedded store's claims and accepts in place of the shared
	// append: the least the default set-up (SQLite) must do.
	as2SQLite := as2 - f.append/floorSenders + f.store
	b.ReportMetric(float64(2*f.sign)/float64(as2SQLite), "as2-sqlite-floor-ratio")
	b.ReportMetric(float64(2*f.sign)/float64(as2SQLite+parse), "as4-sqlite-floor-ratio")
}

// floor holds the CPU time per message of each part (see BenchmarkFloor).
type floor struct {
	sign, verify, exchange, inbox, append, store time.Duration
}

func measureFloor(b *testing.B, n int) floor {
	key, err := readRSAKey(filepath.Join(demoDir(b), "keys", "gateway.key"))
	if err != nil {
		b.Fatal(err)
	}
	digest := sha256.Sum256([]byte("floor"))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		b.Fatal(err)
	}
	var f floor
	f.sign = cpuPer(n, func(int) {
		if _, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:]); err != nil {
			b.Fatal(err)
		}
	})
	f.verify = cpuPer(n, func(int) {
		if err := rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, digest[:], sig); err != nil {
			b.Fatal(err)
		}
	})
	f.exchange = floorHTTP(b, n)
	f.inbox = floorInbox(b, n)
	f.append = floorAppend(b, n)
	f.store = floorStore(b, n)
	return f
}

// floorAS4Envelope is the SOAP envelope (the multipart's root part) of one
// message as gateway-load sends it to the demo gateway.
func floorAS4Envelope(b *testing.B) []byte {
	// The tool's own defaults (parties, service, action) with the demo's keys.
	o, err := parseFlags(append(demoFlags(b), "-protocol", "as4"), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	drv, err := newAS4Driver(o, http.DefaultClient)
	if err != nil {
		b.Fatal(err)
	}
	m, err := drv.build(0, interchange(o.unbSender, o.unbRecipient, reference("FLOOR0", 0), floorPayload))
	if err != nil {
		b.Fatal(err)
	}
	out := m.(*client.Outgoing)
	_, params, err := mime.ParseMediaType(out.ContentType)
	if err != nil {
		b.Fatal(err)
	}
	part, err := multipart.NewReader(bytes.NewReader(out.Body), params["boundary"]).NextPart()
	if err != nil {
		b.Fatal(err)
	}
	envelope, err := io.ReadAll(part)
	if err != nil || !bytes.Contains(envelope, []byte("Envelope")) {
		b.Fatalf("root part %.80q: %v", envelope, err)
	}
	return envelope
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
	return concurrently(b, n, func(int) error { return post() })
}

// floorInbox is the CPU time of the `dir` handler's durable write of one
// 10 KB payload and its sidecar (the gateway's own inbox.Dir: each file
// synced, the directory's sync shared by the handlers writing at the same
// time), floorSenders at a time.
//
// With $FLOOR_INBOX_DIR set, the inbox is a new directory below it that is
// kept: on a file system that skips recently deleted inodes one by one
// (ext4 without a journal), creating files near thousands deleted in the
// last 30 seconds (an earlier run's clean-up, a build's temporary files)
// costs two to four times as much, which measures the neighbours, not the
// work.
func floorInbox(b *testing.B, n int) time.Duration {
	root := b.TempDir()
	if keep := os.Getenv("FLOOR_INBOX_DIR"); keep != "" {
		var err error
		if root, err = os.MkdirTemp(keep, "floor-inbox-"); err != nil {
			b.Fatal(err)
		}
	}
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
	return concurrently(b, n, func(i int) error { return h.Handle(context.Background(), msgs[i]) })
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

// floorStore is the CPU time of the SQLite store's part of one exchange and
// nothing else (no audit record): the claims of a new transport key and of
// its interchange (the business key) in one transaction, their accepts with
// a stored reply the size of a signed MDN in another, floorSenders exchanges
// at a time (the store's group commit: one WAL sync covers every waiting
// request), synchronous=FULL as served.
func floorStore(b *testing.B, n int) time.Duration {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "floor.db"), dedup.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	reply := bytes.Repeat([]byte("m"), floorAnswer)
	sum := sha256.Sum256([]byte("floor"))
	hash := hex.EncodeToString(sum[:])
	return concurrently(b, n, func(i int) error {
		id := fmt.Sprintf("floor-%d@gateway-load", i)
		key := dedup.TransportKey("as2", "as2", "FLOOR", id)
		ref := fmt.Sprintf("F%013d", i)
		ic := dedup.Interchange{Key: dedup.Key("edifact/FLOOR/GATEWAY/" + ref), Partner: "floor", Standard: "edifact",
			Sender: "FLOOR", Recipient: "GATEWAY", Reference: ref}
		var transport, business dedup.Decision
		err := s.Atomically(ctx, func(ctx context.Context) error {
			var err error
			if transport, err = s.Claim(ctx, dedup.ClaimRequest{Key: key, PayloadSHA256: hash}); err != nil {
				return err
			}
			business, err = s.ClaimInterchange(ctx, dedup.InterchangeClaim{Interchange: ic, PayloadSHA256: hash,
				TransportKey: key, MessageID: id, Window: 90 * 24 * time.Hour})
			return err
		})
		if err == nil && (transport.Outcome != dedup.Claimed || business.Outcome != dedup.Claimed) {
			err = fmt.Errorf("claims of new keys: %v, %v", transport.Outcome, business.Outcome)
		}
		if err != nil {
			return err
		}
		return s.Atomically(ctx, func(ctx context.Context) error {
			if err := s.AcceptInterchange(ctx, ic.Key, business.Token); err != nil {
				return err
			}
			return s.Accept(ctx, key, transport.Token, reply)
		})
	})
}

// concurrently runs op for 0..n-1 on floorSenders goroutines and returns
// this process's CPU time per run.
func concurrently(b *testing.B, n int, op func(i int) error) time.Duration {
	jobs := make(chan int)
	errs := make(chan error, floorSenders)
	var wg sync.WaitGroup
	c0, _ := processCPU()
	for range floorSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := op(i); err != nil {
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
