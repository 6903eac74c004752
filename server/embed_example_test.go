package server_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/server"
)

// A program that embeds the gateway: its own gateway.yaml (here an
// in-memory store, one trading partner, our AS2/AS4 identity), its own
// business handler, and its own listeners (here loopback with ports the
// system picks). The gateway serves until its context is cancelled, then
// shuts down gracefully: in-flight exchanges finish, new ones are refused.
func Example_embeddingServeAndShutDown() {
	dir, err := os.MkdirTemp("", "gateway-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	// Our identity (the certificate partners encrypt to and verify our
	// MDNs and receipts with) and one partner's certificate. In production
	// these come from your CA or the partner; see "gateway partners check".
	if err := writeSelfSigned(dir, "gateway", "GATEWAY"); err != nil {
		fmt.Println(err)
		return
	}
	if err := os.Mkdir(filepath.Join(dir, "partners"), 0o755); err != nil {
		fmt.Println(err)
		return
	}
	if err := writeSelfSigned(filepath.Join(dir, "partners"), "acme", "ACME"); err != nil {
		fmt.Println(err)
		return
	}
	files := map[string]string{
		"gateway.yaml": `store: "memory:"
partners: partners
quarantine_dir: quarantine
handler: {type: dir, inbox: inbox} # replaced by SetHandler below
identity:
  as2_id: GATEWAY
  party_id: urn:example:gateway
  keys:
    - cert: gateway.pem
      key: gateway.key
`,
		"partners/acme.yaml": `id: acme
as2:
  as2_id: ACME
  certificates: [acme.pem]
as4:
  party_id: urn:example:acme
  certificates: [acme.pem]
  pmodes:
    - id: invoices
      service: urn:example:invoicing
      action: Deliver
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			fmt.Println(err)
			return
		}
	}

	cfg, err := config.Load(filepath.Join(dir, "gateway.yaml"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	srv, err := server.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	srv.SetHandler(exchange.HandlerFunc(func(ctx context.Context, m *exchange.Message) error {
		return nil // hand m.Payloads to the business system here
	}))
	fmt.Println("partners:", len(srv.Directory().Partners))

	partnerLn, err := net.Listen("tcp", "127.0.0.1:0") // AS2 at /as2, AS4 at /as4
	if err != nil {
		fmt.Println(err)
		return
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0") // /healthz, /readyz, /metrics, /console/
	if err != nil {
		fmt.Println(err)
		return
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeListeners(ctx, partnerLn, adminLn) }()

	// An AS2 or AS4 message is a POST; a GET only shows that the endpoint
	// is mounted.
	resp, err := http.Get("http://" + partnerLn.Addr().String() + "/as2")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("GET /as2:", resp.Status)

	stop() // SIGTERM in a real program (signal.NotifyContext)
	fmt.Println("stopped:", <-served)
	// Output:
	// partners: 1
	// GET /as2: 405 Method Not Allowed
	// stopped: <nil>
}

// writeSelfSigned writes an RSA-2048 key and a self-signed certificate for
// it as name.key and name.pem in dir.
func writeSelfSigned(dir, name, commonName string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600)
}
