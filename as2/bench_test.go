package as2

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	as2client "github.com/edigateway/gateway/as2/client"
)

// BenchmarkEndpointSignedEncrypted10KB posts 10 KB signed (sha256) and
// encrypted (aes128-cbc) messages asking for a signed sync MDN through the
// HTTP server on SQLite from four concurrent senders; the messages are built before the timer starts,
// so the sender's RSA work is not counted. Each message costs the gateway
// two RSA private-key operations (key transport, MDN signature): compare
// msgs/s with BenchmarkRSA2048PrivateOp's ops/s ÷ 2.
func BenchmarkEndpointSignedEncrypted10KB(b *testing.B) {
	e := newEnv(b, envOptions{memory: benchMemory})
	c := e.client()
	c.Cipher = "aes128-cbc"
	payload := bytes.Repeat([]byte("UNH+1+ORDERS:D:96A:UN'BGM+220+4711'\n"), 10240/36)
	msgs := make([]*as2client.Message, b.N)
	for i := range msgs {
		m, err := c.Prepare(payload, "application/edifact", "")
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = m
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	// Four senders at once, as partners' connections would be, so that the
	// store's fsync latency overlaps with RSA work.
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
				}
				res, err := c.Send(context.Background(), msgs[i])
				if err == nil && !res.OK() {
					err = fmt.Errorf("%v", res.Problems)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkRSA2048PrivateOp signs a SHA-256 digest with the gateway's key:
// the rate of RSA-2048 private-key operations on this machine.
func BenchmarkRSA2048PrivateOp(b *testing.B) {
	k := getKeys(b)
	d := sha256.Sum256([]byte("x"))
	b.ResetTimer()
	for range b.N {
		if _, err := k.gw1.Key.Sign(rand.Reader, d[:], crypto.SHA256); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// benchMemory runs BenchmarkEndpointSignedEncrypted10KB on the memory store
// (set by BenchmarkEndpointSignedEncrypted10KBMemory) to separate the
// store's cost from the protocol's.
var benchMemory bool

// BenchmarkEndpointSignedEncrypted10KBMemory is the same on the memory
// store: the difference is the SQLite store's (fsync) cost.
func BenchmarkEndpointSignedEncrypted10KBMemory(b *testing.B) {
	benchMemory = true
	defer func() { benchMemory = false }()
	BenchmarkEndpointSignedEncrypted10KB(b)
}
