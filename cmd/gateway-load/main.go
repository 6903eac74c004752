// Command gateway-load drives a running gateway with AS2 or AS4 traffic and
// reports its throughput beside the machine's RSA-2048 private-key rate.
//
//	gateway-load -protocol as2 -url http://127.0.0.1:8080/as2 -n 2000 -c 8 -size 10240
//	gateway-load -protocol as4 -url http://127.0.0.1:8080/as4 -n 1000 -c 8 -duplicates 0.05
//
// Every message is built before the clock starts: a signed and encrypted
// EDIFACT interchange (AS4 also gzip-compressed) with its own UNB 0020
// control reference, so that the gateway's business dedup sees distinct
// interchanges. A fraction of the messages (-duplicates) is sent a second
// time with identical bytes once the first transmission was answered. Each
// answer is verified: AS2 a signed MDN with the message's MIC, AS4 a signed
// receipt with NonRepudiationInformation covering every reference, and a
// retransmission's receipt byte-identical to the first one.
//
// Before the first message is sent, while the gateway is idle, the tool
// measures the bound: RSA private-key operations (PKCS#1 v1.5 SHA-256
// signatures with -op-key) on GOMAXPROCS goroutines, every core, for
// -op-time (3 s). Then it sends and prints one line:
//
//	gateway-load as2: messages=2000 unique=2000 duplicates=0 elapsed=6.512s msgs/s=307.1 p50=23.4ms p95=40.1ms p99=55.0ms failures=0 duplicates_answered=0/0 rsa2048_ops/s=1080.2 sign_goroutines=2 bound_msgs/s=540.1 ratio=0.569
//
// where bound_msgs/s = ops/s ÷ 2 and ratio = msgs/s ÷ bound. The line goes
// on with CPU figures, which a busy machine disturbs far less than rates:
// rsa_cpu_ms/op, the CPU time this tool spent per private-key operation
// while measuring the bound, and with -metrics gateway_cpu_ms/msg, the
// gateway's CPU time (user + system, its process_cpu_seconds_total) per
// transmission during the load, and non_rsa_cpu_ms/msg = gateway_cpu_ms/msg
// − 2 × rsa_cpu_ms/op, what the gateway spends beside its two private-key
// operations:
//
//	… ratio=0.569 rsa_cpu_ms/op=1.851 gateway_cpu_ms/msg=5.120 non_rsa_cpu_ms/msg=1.418 load_cpu_ms/msg=0.411 ceiling_ratio=0.900 cpu_bound_ratio=0.667
//
// load_cpu_ms/msg is this tool's own CPU time (user + system) per
// transmission while it sends and verifies. Both run on the cores the bound
// was measured on, so ceiling_ratio = 2r ÷ (2r + l) (r the RSA CPU per
// operation, l the tool's CPU per message) is the most any gateway could
// reach here beside this tool if it did nothing but its two private-key
// operations, and cpu_bound_ratio = 2r ÷ (g + l) (g the gateway's CPU per
// message) the ratio the measured CPU costs allow with every core busy:
// ratio ÷ cpu_bound_ratio is how busy the run kept the cores. -cpuprofile
// FILE profiles the tool during the sending phase.
//
// The bound: a message costs
// the gateway two RSA private-key operations (AS2: key transport and MDN
// signature; AS4: key unwrap and receipt signature). The load tool's own
// work (sending, verifying the MDNs and receipts) runs on the same cores
// during the load, so a ratio of 1 is out of reach on one machine.
//
// It is a test tool: it only talks to loopback addresses, and the message
// count, concurrency, size and run time are bounded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"time"
)

// Bounds of one run.
const (
	maxMessages    = 1_000_000
	maxConcurrency = 256
	minSize        = 1
	maxSize        = 16 << 20
	maxTotalBytes  = 1 << 30 // payload bytes built up front
	maxTimeout     = time.Hour
	maxOpTime      = 30 * time.Second
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

// errFailures is returned when some message was not answered correctly
// (exit status 1, after the summary).
var errFailures = errors.New("gateway-load: some messages failed")

func run(args []string, stdout, stderr io.Writer) int {
	err := runLoad(args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "gateway-load:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "gateway-load:", err)
		return 1
	}
}

func runLoad(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if o.mode == "send" {
		s, err := sendLoad(ctx, o, stderr)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, s)
		if s.failed > 0 || s.notFinal > 0 {
			return errSendFailures
		}
		return nil
	}
	s, err := load(ctx, o, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s)
	if s.failures > 0 {
		return errFailures
	}
	return nil
}

// options are the command-line settings.
type options struct {
	url             string
	protocol        string
	n, c, size      int
	duplicates      float64
	keyFile         string
	certFile        string
	gatewayCertFile string
	opKeyFile       string
	opTime          time.Duration
	timeout         time.Duration
	requestTimeout  time.Duration
	cipher          string
	// metricsURL is the gateway's admin /metrics, read before and after the
	// load for its CPU time (process_cpu_seconds_total); empty: not read.
	metricsURL string
	// cpuProfile is where a CPU profile of this tool's sending phase goes
	// (empty: none).
	cpuProfile string
	// AS2 names.
	as2From, as2To string
	// AS4 parties and collaboration.
	from, to, partyType, service, action string
	// UNB interchange sender and recipient of the EDIFACT payloads.
	unbSender, unbRecipient string
	// mode is "receive" (the tool is the partner sending to the gateway)
	// or "send" (the tool submits through a sending gateway's API).
	mode string
	// -mode send: the sending gateway's admin base URL, its token file,
	// the partner to send to and the receiving gateway's /metrics.
	submitURL, tokenFile, partner, recvMetricsURL string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("gateway-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gateway-load [-protocol as2|as4] [-url URL] [-n N] [-c C] [-size BYTES] [-duplicates FRACTION] [flags]")
		fmt.Fprintln(stderr, "       gateway-load -mode send -submit-url ADMIN_URL -partner ID [-protocol as2|as4] [-n N] [-c C] [-metrics URL] [-recv-metrics URL] [flags]")
		fs.PrintDefaults()
	}
	o := &options{}
	fs.StringVar(&o.mode, "mode", "receive", "receive: the tool is a partner sending to the gateway; send: the tool submits -n messages through the sending gateway's API (-submit-url) for -partner, a receiving gateway, and reports sent msgs/s and both gateways' CPU ms per message")
	fs.StringVar(&o.submitURL, "submit-url", "http://127.0.0.1:8079", "-mode send: the sending gateway's admin listener (submission API) on a loopback address")
	fs.StringVar(&o.tokenFile, "token-file", "", "-mode send: file holding the sending gateway's admin token (default GATEWAY_ADMIN_TOKEN)")
	fs.StringVar(&o.partner, "partner", "", "-mode send: the partner id (in the sending gateway's directory) of the receiving gateway")
	fs.StringVar(&o.recvMetricsURL, "recv-metrics", "", "-mode send: the receiving gateway's admin /metrics on a loopback address (its CPU ms per message); -metrics is the sending gateway's")
	fs.StringVar(&o.url, "url", "", "the gateway's endpoint on a loopback address (default http://127.0.0.1:8080/<protocol>)")
	fs.StringVar(&o.protocol, "protocol", "as2", "as2 or as4")
	fs.IntVar(&o.n, "n", 1000, fmt.Sprintf("messages to send (distinct interchanges, at most %d)", maxMessages))
	fs.IntVar(&o.c, "c", 8, fmt.Sprintf("concurrent senders (at most %d)", maxConcurrency))
	fs.IntVar(&o.size, "size", 10240, "payload bytes of each message (the EDIFACT envelope's length at least)")
	fs.Float64Var(&o.duplicates, "duplicates", 0, "fraction of the messages sent a second time with identical bytes (0 to 1)")
	fs.StringVar(&o.keyFile, "key", "testdata/demo/keys/demo-partner.key", "the partner's PEM private key (signs the messages)")
	fs.StringVar(&o.certFile, "cert", "testdata/demo/partners/demo-partner.pem", "the partner's PEM certificate")
	fs.StringVar(&o.gatewayCertFile, "gateway-cert", "testdata/demo/keys/gateway.pem", "the gateway's PEM certificate (encrypts, verifies MDNs and receipts)")
	fs.StringVar(&o.opKeyFile, "op-key", "testdata/demo/keys/gateway.key", "RSA PEM private key whose private-op rate is measured (the gateway's; empty: -key)")
	fs.DurationVar(&o.opTime, "op-time", 3*time.Second, "how long the RSA private-op rate (the bound) is measured on every core, before the load")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, fmt.Sprintf("bound of the whole run (at most %s)", maxTimeout))
	fs.DurationVar(&o.requestTimeout, "request-timeout", 2*time.Minute, "bound of each HTTP exchange")
	fs.StringVar(&o.metricsURL, "metrics", "", "the gateway's admin /metrics URL on a loopback address: its process_cpu_seconds_total before and after the load gives the gateway's CPU ms per message")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this tool while it sends and verifies (not while it builds or measures the bound) to this file")
	fs.StringVar(&o.cipher, "cipher", "", "content encryption (AS2 default aes128-cbc; AS4 aes128-gcm, aes192-gcm or aes256-gcm)")
	fs.StringVar(&o.as2From, "as2-from", "DEMO", "AS2-From (the partner)")
	fs.StringVar(&o.as2To, "as2-to", "GATEWAY", "AS2-To (the gateway)")
	fs.StringVar(&o.from, "from", "urn:demo:partner", "AS4 eb:From PartyId")
	fs.StringVar(&o.to, "to", "urn:demo:gateway", "AS4 eb:To PartyId")
	fs.StringVar(&o.partyType, "party-type", "urn:oasis:names:tc:ebcore:partyid-type:unregistered", "type of -from and -to")
	fs.StringVar(&o.service, "service", "urn:demo:invoicing", "AS4 eb:Service")
	fs.StringVar(&o.action, "action", "Deliver", "AS4 eb:Action")
	fs.StringVar(&o.unbSender, "unb-sender", "DEMO", "UNB interchange sender of the payloads")
	fs.StringVar(&o.unbRecipient, "unb-recipient", "GATEWAY", "UNB interchange recipient of the payloads")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if o.url == "" {
		o.url = "http://127.0.0.1:8080/" + o.protocol
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.opKeyFile == "" {
		o.opKeyFile = o.keyFile
	}
	return o, nil
}

func (o *options) validate() error {
	switch {
	case o.protocol != "as2" && o.protocol != "as4":
		return fmt.Errorf("%w: -protocol must be as2 or as4, not %q", errUsage, o.protocol)
	case o.n < 1 || o.n > maxMessages:
		return fmt.Errorf("%w: -n must be 1 to %d", errUsage, maxMessages)
	case o.c < 1 || o.c > maxConcurrency:
		return fmt.Errorf("%w: -c must be 1 to %d", errUsage, maxConcurrency)
	case o.size < minSize || o.size > maxSize:
		return fmt.Errorf("%w: -size must be %d to %d bytes", errUsage, minSize, maxSize)
	case int64(o.n)*int64(o.size) > maxTotalBytes:
		return fmt.Errorf("%w: -n × -size is more than %d bytes to build up front", errUsage, maxTotalBytes)
	case !(o.duplicates >= 0 && o.duplicates <= 1):
		return fmt.Errorf("%w: -duplicates must be a fraction from 0 to 1", errUsage)
	case o.timeout <= 0 || o.timeout > maxTimeout:
		return fmt.Errorf("%w: -timeout must be positive and at most %s", errUsage, maxTimeout)
	case o.requestTimeout <= 0:
		return fmt.Errorf("%w: -request-timeout must be positive", errUsage)
	case o.opTime <= 0 || o.opTime > maxOpTime:
		return fmt.Errorf("%w: -op-time must be positive and at most %s", errUsage, maxOpTime)
	}
	if err := checkLoopback(o.url); err != nil {
		return err
	}
	if o.metricsURL != "" {
		if err := checkLoopback(o.metricsURL); err != nil {
			return fmt.Errorf("-metrics: %w", err)
		}
	}
	return o.validateSend()
}

// validateSend checks the settings of -mode send.
func (o *options) validateSend() error {
	switch {
	case o.mode == "receive":
		return nil
	case o.mode != "send":
		return fmt.Errorf("%w: -mode must be receive or send, not %q", errUsage, o.mode)
	case o.partner == "":
		return fmt.Errorf("%w: -mode send needs -partner", errUsage)
	}
	if err := checkLoopback(o.submitURL); err != nil {
		return fmt.Errorf("-submit-url: %w", err)
	}
	if o.recvMetricsURL != "" {
		if err := checkLoopback(o.recvMetricsURL); err != nil {
			return fmt.Errorf("-recv-metrics: %w", err)
		}
	}
	return nil
}

// checkLoopback refuses URLs that do not name this machine: the tool is
// for load tests of a local gateway only.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: -url: %v", errUsage, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: -url must be http or https, not %q", errUsage, u.Scheme)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: -url host %q is not a loopback address (127.0.0.0/8, ::1 or localhost)", errUsage, host)
	}
	return nil
}
