package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/pickup"
	"github.com/edigateway/gateway/internal/submitapi"
	"github.com/edigateway/gateway/outbound"
)

const submitUsage = `usage: gateway submit -partner ID -file PATH [options]
Queues PATH to be sent to partner ID through the running gateway's submission API
(POST /api/v1/outbound/messages on the admin listener, docs/sending.md) and prints the
message's queue id, its transport message id and its status URL. The payload is streamed.

The idempotency key defaults to one derived from the file (name, size, modification time,
SHA-256) and the -property flags, as a pickup directory derives it from a file and its
sidecar: running the command twice for the same file and properties queues it once; other
properties queue another message. With -wait the
command polls the status until the message is final: exit status 0 when delivered, 1 when
failed or cancelled (or still not final when -wait runs out).

The admin address and token come from the configuration (admin.listen, admin.token_file
or GATEWAY_ADMIN_TOKEN, admin.tls.cert), or from -url and -token-file (and -ca-file for an
https URL whose certificate the system does not trust). An admin listener that asks for a
client certificate (admin.tls.client_ca) gets -client-cert and -client-key:
  gateway submit -config gateway.yaml -partner acme -file invoice.edi -wait 2m
  gateway submit -url http://127.0.0.1:8079 -token-file admin.token -partner acme -file invoice.edi
  gateway submit -config gateway.yaml -partner stadtwerke -file utilmd.edi \
    -property BDEWDocumentType=UTILMD -property BDEWDocumentNo=4711
  gateway submit -url https://gw.example:8079 -ca-file admin-ca.pem -client-cert ops.pem \
    -client-key ops.key -token-file admin.token -partner acme -file invoice.edi

flags:
`

type submitOptions struct {
	partner, file, protocol, key, contentType, filename, subject string
	url, tokenFile, cfgPath                                      string
	caFile, clientCert, clientKey                                string
	wait, poll                                                   time.Duration
	// properties are the -property NAME=VALUE flags, in order.
	properties []outbound.Property
}

func parseSubmitFlags(args []string, stderr io.Writer) (*submitOptions, error) {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &submitOptions{}
	fs.StringVar(&o.partner, "partner", "", "partner id (required)")
	fs.StringVar(&o.file, "file", "", "payload file (required)")
	fs.StringVar(&o.protocol, "protocol", "", "as2 or as4 (default: the one the partner sends with)")
	fs.StringVar(&o.key, "idempotency-key", "", "idempotency key (default: derived from the file's name, size, mtime and SHA-256 and the -property flags)")
	fs.StringVar(&o.contentType, "content-type", "", "payload content type (default: the partner's send content_type)")
	fs.StringVar(&o.filename, "filename", "", "file name the partner is given (default: the file's base name)")
	fs.StringVar(&o.subject, "subject", "", "AS2 Subject (default: the partner's)")
	var props []string
	fs.Func("property", "AS4 part property NAME=VALUE of the payload, e.g. BDEWDocumentType=UTILMD (repeatable; sent in the order given)", func(v string) error {
		props = append(props, v)
		return nil
	})
	fs.DurationVar(&o.wait, "wait", 0, "wait this long for the final outcome (0: do not wait)")
	fs.DurationVar(&o.poll, "poll", 2*time.Second, "with -wait: how often the status is asked")
	cfgPath := configFlag(fs)
	fs.StringVar(&o.url, "url", "", "admin listener URL, e.g. http://127.0.0.1:8079 (instead of -config)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the admin bearer token (with -url; default GATEWAY_ADMIN_TOKEN)")
	fs.StringVar(&o.caFile, "ca-file", "", "with an https -url: PEM certificates trusted for the admin listener besides the system's")
	fs.StringVar(&o.clientCert, "client-cert", "", "PEM certificate presented to an admin listener that asks for one (admin.tls.client_ca)")
	fs.StringVar(&o.clientKey, "client-key", "", "the PEM private key of -client-cert")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), submitUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.cfgPath = *cfgPath
	for _, v := range props {
		p, err := outbound.ParseProperty(v)
		if err != nil {
			return nil, fmt.Errorf("%w: -property: %w", errUsage, err)
		}
		o.properties = append(o.properties, p)
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("%w: submit takes no arguments, got %q", errUsage, fs.Args())
	case o.partner == "" || o.file == "":
		return nil, fmt.Errorf("%w: submit needs -partner and -file", errUsage)
	case o.url != "" && flagGiven(fs, "config"):
		return nil, fmt.Errorf("%w: submit takes -url or -config, not both", errUsage)
	case o.protocol != "" && o.protocol != "as2" && o.protocol != "as4":
		return nil, fmt.Errorf("%w: -protocol %q is not as2 or as4", errUsage, o.protocol)
	case o.wait < 0 || o.poll <= 0:
		return nil, fmt.Errorf("%w: -wait must not be negative, -poll must be positive", errUsage)
	case (o.clientCert == "") != (o.clientKey == ""):
		return nil, fmt.Errorf("%w: -client-cert and -client-key go together", errUsage)
	case o.caFile != "" && o.url == "":
		return nil, fmt.Errorf("%w: -ca-file goes with -url (with -config, admin.tls.cert is trusted)", errUsage)
	case o.protocol == "as2" && len(o.properties) > 0:
		return nil, fmt.Errorf("%w: -property: AS2 has no part properties (they are AS4's)", errUsage)
	}
	if err := outbound.ValidateProperties(o.properties); err != nil {
		return nil, fmt.Errorf("%w: -property: %w", errUsage, err)
	}
	return o, nil
}

// flagGiven reports whether name was on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// adminClient is the admin listener's base URL, token and HTTP client.
type adminClient struct {
	base, token string
	hc          *http.Client
}

func (o *submitOptions) admin() (*adminClient, error) {
	c := &adminClient{base: strings.TrimSuffix(o.url, "/"), hc: &http.Client{}}
	var trust []string // PEM files trusted for the admin listener's certificate
	if c.base != "" {
		c.token = os.Getenv("GATEWAY_ADMIN_TOKEN")
		if o.tokenFile != "" {
			b, err := os.ReadFile(o.tokenFile)
			if err != nil {
				return nil, fmt.Errorf("submit: -token-file: %w", err)
			}
			c.token = strings.TrimSpace(string(b))
		}
		if o.caFile != "" {
			trust = append(trust, o.caFile)
		}
	} else {
		cfg, err := config.Load(o.cfgPath)
		if err != nil {
			return nil, err
		}
		c.token = cfg.Admin.Token
		c.base = "http://" + dialable(cfg.Admin.Listen)
		if cfg.Admin.TLS.ClientCA != "" && o.clientCert == "" {
			return nil, errors.New("submit: the admin listener asks for a client certificate (admin.tls.client_ca): give -client-cert and -client-key")
		}
		if cfg.Admin.TLS.Cert != "" {
			// The admin certificate is commonly self-signed: trust it as
			// given, besides the system's roots.
			trust = append(trust, cfg.Admin.TLS.Cert)
			c.base = "https://" + dialable(cfg.Admin.Listen)
		}
	}
	if len(trust) == 0 && o.clientCert == "" {
		return c, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(trust) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for _, f := range trust {
			pem, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("submit: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("submit: %s holds no PEM certificate", f)
			}
		}
		tc.RootCAs = pool
	}
	if o.clientCert != "" {
		pair, err := tls.LoadX509KeyPair(o.clientCert, o.clientKey)
		if err != nil {
			return nil, fmt.Errorf("submit: -client-cert/-client-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	c.hc.Transport = &http.Transport{TLSClientConfig: tc}
	return c, nil
}

// dialable turns a listen address into one to dial: an unspecified host
// (":8079", "0.0.0.0:8079", "[::]:8079") is the loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

func (c *adminClient) do(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	return resp, nil
}

// apiError reads an error answer of the API.
func apiError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e submitapi.Error
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return fmt.Errorf("submit: %s: %s (incident %s)", resp.Status, e.Error, e.Incident)
	}
	return fmt.Errorf("submit: %s: %s", resp.Status, strings.TrimSpace(string(b)))
}

// fileKey is the default idempotency key of a file with its part
// properties (as a pickup directory derives it from a file and its
// sidecar).
func fileKey(f *os.File, fi os.FileInfo, props []outbound.Property) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("submit: reading %s: %w", f.Name(), err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("submit: %w", err)
	}
	return pickup.FileKey(fi.Name(), fi.Size(), fi.ModTime(), hex.EncodeToString(h.Sum(nil)), props...), nil
}

// submit is `gateway submit`.
func submit(args []string, stdout, stderr io.Writer) error {
	o, err := parseSubmitFlags(args, stderr)
	if err != nil {
		return err
	}
	c, err := o.admin()
	if err != nil {
		return err
	}
	f, err := os.Open(o.file)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("submit: %s is not a regular file", o.file)
	}
	key := o.key
	if key == "" {
		if key, err = fileKey(f, fi, o.properties); err != nil {
			return err
		}
	}
	filename := o.filename
	if filename == "" {
		filename = filepath.Base(o.file)
	}
	q := url.Values{"partner": {o.partner}, "filename": {filename}}
	for k, v := range map[string]string{"protocol": o.protocol, "subject": o.subject} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for _, p := range o.properties {
		q.Add("property", p.Name+"="+p.Value)
	}
	req, err := http.NewRequest(http.MethodPost, c.base+submitapi.Prefix+"/messages?"+q.Encode(), io.LimitReader(f, fi.Size()))
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	req.ContentLength = fi.Size()
	req.Header.Set("Idempotency-Key", key)
	if o.contentType != "" {
		req.Header.Set("Content-Type", o.contentType)
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return apiError(resp)
	}
	var s submitapi.Submitted
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&s); err != nil {
		return fmt.Errorf("submit: reading the answer: %w", err)
	}
	if resp.StatusCode == http.StatusOK {
		fmt.Fprintf(stdout, "already queued under idempotency key %s\n", key)
	}
	fmt.Fprintf(stdout, "id:         %s\nmessage id: %s\npartner:    %s (%s)\nstate:      %s\nstatus:     %s\n",
		s.ID, s.MessageID, s.Partner, s.Protocol, s.State, c.base+s.StatusURL)
	if o.wait == 0 {
		return nil
	}
	return c.await(s, o.wait, o.poll, stdout)
}

// await polls a message's status until it is final or wait runs out.
func (c *adminClient) await(s submitapi.Submitted, wait, poll time.Duration, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	last, state := "", "queued"
	for {
		st, err := c.status(ctx, s.StatusURL)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil {
			state = st.State
			if line := st.State + " " + st.LastError; line != last {
				last = line
				fmt.Fprintf(stdout, "%s  %s (attempts %d)%s\n", time.Now().Format(time.TimeOnly), st.State, st.Attempts, suffix(" last error: ", st.LastError))
			}
			if st.Final {
				return finalOutcome(st, stdout)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("submit: message %s is still %s after %s (it stays queued; its status: %s)", s.ID, state, wait, c.base+s.StatusURL)
		case <-time.After(poll):
		}
	}
}

func suffix(label, v string) string {
	if v == "" {
		return ""
	}
	return label + v
}

func finalOutcome(st submitapi.Status, stdout io.Writer) error {
	if ev := st.Evidence; ev != nil {
		fmt.Fprintf(stdout, "evidence:   %s %s%s\n", ev.Kind, ev.Disposition, suffix(", signed by ", ev.Signer))
	}
	if st.State == "delivered" {
		return nil
	}
	return fmt.Errorf("submit: message %s %s: %s", st.ID, st.State, st.Reason)
}

func (c *adminClient) status(ctx context.Context, path string) (submitapi.Status, error) {
	var st submitapi.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return st, fmt.Errorf("submit: %w", err)
	}
	resp, err := c.do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, apiError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return st, fmt.Errorf("submit: reading the status: %w", err)
	}
	return st, nil
}
