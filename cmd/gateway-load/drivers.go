package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	as2client "github.com/edigateway/gateway/as2/client"
	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/xmlenc"
	"github.com/edigateway/gateway/mdn"
)

// loadIdentity reads the partner's key pair and the gateway's certificate.
func loadIdentity(o *options) (cms.KeyPair, *x509.Certificate, error) {
	certPEM, err := os.ReadFile(o.certFile)
	if err != nil {
		return cms.KeyPair{}, nil, fmt.Errorf("gateway-load: -cert: %w", err)
	}
	keyPEM, err := os.ReadFile(o.keyFile)
	if err != nil {
		return cms.KeyPair{}, nil, fmt.Errorf("gateway-load: -key: %w", err)
	}
	kp, err := cms.ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return cms.KeyPair{}, nil, fmt.Errorf("gateway-load: -cert/-key: %w", err)
	}
	gwPEM, err := os.ReadFile(o.gatewayCertFile)
	if err != nil {
		return cms.KeyPair{}, nil, fmt.Errorf("gateway-load: -gateway-cert: %w", err)
	}
	gw, err := cms.ParseCertificates(gwPEM)
	if err != nil {
		return cms.KeyPair{}, nil, fmt.Errorf("gateway-load: -gateway-cert: %w", err)
	}
	return kp, gw[0], nil
}

// as2Driver sends signed (SHA-256) and encrypted AS2 messages asking for a
// signed sync MDN, and checks each MDN: signature by the gateway,
// Original-Message-ID, positive disposition, Received-Content-MIC.
type as2Driver struct {
	c *as2client.Client
}

func newAS2Driver(o *options, hc *http.Client) (*as2Driver, error) {
	kp, gw, err := loadIdentity(o)
	if err != nil {
		return nil, err
	}
	cipher := o.cipher
	if cipher == "" {
		cipher = "aes128-cbc"
	}
	return &as2Driver{c: &as2client.Client{
		URL: o.url, From: o.as2From, To: o.as2To,
		SignCert: kp.Cert, SignKey: kp.Key, SignDigest: "sha256",
		RecipientCerts: []*x509.Certificate{gw}, Cipher: cipher,
		MDN: as2client.MDNSync, SignedMDN: true,
		Subject: "gateway-load", HTTP: hc,
	}}, nil
}

func (d *as2Driver) build(i int, payload []byte) (any, error) {
	return d.c.Prepare(payload, "application/edifact", fmt.Sprintf("load-%d.edi", i))
}

func (d *as2Driver) send(ctx context.Context, m any) (answer, error) {
	msg := m.(*as2client.Message)
	res, err := d.c.Send(ctx, msg)
	if err != nil {
		return answer{}, err
	}
	if !res.OK() {
		return answer{}, fmt.Errorf("HTTP %d: %s", res.Status, strings.Join(res.Problems, "; "))
	}
	if res.MDN == nil || !res.MDN.Verified {
		return answer{}, errors.New("no verified signed MDN")
	}
	disp := res.MDN.Disposition
	return answer{duplicate: disp.IsWarning() && disp.Description == mdn.DescDuplicateDocument}, nil
}

// sameReply: the MDN of a retransmission was already checked against the
// message's own MIC (the original Received-Content-MIC); its signature
// time differs, so bytes are not compared.
func (d *as2Driver) sameReply(first, again answer) bool { return true }

// as4Driver sends AS4 user messages with one gzip-compressed EDIFACT
// attachment, signed (RSA-SHA256) and encrypted (RSA-OAEP, AES-GCM), and
// verifies each signed receipt and its NonRepudiationInformation.
type as4Driver struct {
	c   *client.Client
	url string
	msg client.Message
}

var as4Ciphers = map[string]string{"aes128-gcm": xmlenc.AlgAES128GCM, "aes192-gcm": xmlenc.AlgAES192GCM, "aes256-gcm": xmlenc.AlgAES256GCM}

func newAS4Driver(o *options, hc *http.Client) (*as4Driver, error) {
	kp, gw, err := loadIdentity(o)
	if err != nil {
		return nil, err
	}
	cipher := o.cipher
	if cipher == "" {
		cipher = "aes128-gcm"
	}
	alg, ok := as4Ciphers[cipher]
	if !ok {
		return nil, fmt.Errorf("%w: -cipher %q is not an AS4 content cipher (aes128-gcm, aes192-gcm, aes256-gcm)", errUsage, cipher)
	}
	signer, ok := kp.Key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("gateway-load: -key is not a signing key")
	}
	return &as4Driver{
		c: &client.Client{
			Signer: signer, Certificate: kp.Cert,
			Encryption:     &client.Encryption{Recipient: gw, Options: xmlenc.EncryptOptions{Content: alg}},
			ReceiptSigners: []*x509.Certificate{gw},
			HTTP:           hc, Host: "gateway-load",
		},
		url: o.url,
		msg: client.Message{
			From:    as4.PartyID{Value: o.from, Type: o.partyType},
			To:      as4.PartyID{Value: o.to, Type: o.partyType},
			Service: o.service, Action: o.action,
		},
	}, nil
}

func (d *as4Driver) build(i int, payload []byte) (any, error) {
	m := d.msg
	m.Payloads = []client.Payload{{MimeType: "application/edifact", Data: payload, Compress: true}}
	return d.c.Build(&m)
}

func (d *as4Driver) send(ctx context.Context, m any) (answer, error) {
	out := m.(*client.Outgoing)
	resp, err := d.c.Post(ctx, d.url, out)
	if err != nil {
		return answer{}, err
	}
	if resp.Receipt == nil || resp.Receipt.RefToMessageID != out.MessageID {
		return answer{}, fmt.Errorf("the receipt does not refer to %s", out.MessageID)
	}
	return answer{body: resp.Body}, nil
}

// sameReply: a retransmission gets the stored receipt, byte for byte.
func (d *as4Driver) sameReply(first, again answer) bool { return bytes.Equal(first.body, again.body) }
