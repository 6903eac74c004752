package endpoint

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/internal/brainpool"
)

// errTwoClientCerts: the trusted proxy forwarded the client certificate
// header more than once; the request is answered 400.
var errTwoClientCerts = errors.New("the client certificate header appears more than once")

// maxClientCertHeader bounds the forwarded certificate header.
const maxClientCertHeader = 16 << 10

// clientCertificate returns the TLS client certificate of the request: from
// our own TLS connection, or from Config.ClientCertHeader when the request
// comes from one of Config.TrustedProxies. The header from anywhere else is
// ignored (and reported in ignored), so that a partner cannot claim a
// certificate by sending the header itself.
func (e *Endpoint) clientCertificate(r *http.Request) (cert *x509.Certificate, ignored string, err error) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return r.TLS.PeerCertificates[0], "", nil
	}
	name := e.cfg.ClientCertHeader
	if name == "" {
		return nil, "", nil
	}
	vs := r.Header.Values(name)
	if len(vs) == 0 || len(vs) == 1 && vs[0] == "" {
		return nil, "", nil
	}
	host, _, splitErr := net.SplitHostPort(r.RemoteAddr)
	if splitErr != nil {
		host = r.RemoteAddr
	}
	addr, perr := netip.ParseAddr(host)
	if perr != nil || !e.trustedProxy(addr.Unmap()) {
		return nil, host, nil
	}
	if len(vs) > 1 {
		// A proxy that appends the verified certificate to a header the
		// client already sent: which one it verified cannot be told.
		return nil, "", errTwoClientCerts
	}
	v := vs[0]
	if len(v) > maxClientCertHeader {
		return nil, "", errors.New("forwarded client certificate header too long")
	}
	c, err := parseForwardedCert(v)
	return c, "", err
}

func (e *Endpoint) trustedProxy(a netip.Addr) bool {
	for _, p := range e.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseForwardedCert reads a URL-encoded PEM certificate (nginx
// $ssl_client_escaped_cert) or base64 DER (HAProxy ssl_c_der,base64).
func parseForwardedCert(v string) (*x509.Certificate, error) {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "-----BEGIN") || strings.HasPrefix(v, "%2D") || strings.HasPrefix(v, "%2d") {
		u, err := url.QueryUnescape(v)
		if err != nil {
			return nil, errors.New("forwarded client certificate is not URL-encoded PEM")
		}
		blk, _ := pem.Decode([]byte(u))
		if blk == nil || blk.Type != "CERTIFICATE" {
			return nil, errors.New("forwarded client certificate is not a PEM CERTIFICATE")
		}
		return brainpool.ParseCertificate(blk.Bytes)
	}
	der, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, errors.New("forwarded client certificate is neither URL-encoded PEM nor base64 DER")
	}
	return brainpool.ParseCertificate(der)
}

// checkClientCert refuses a message whose TLS client certificate is not one
// of the sending partner's (when the partner file lists tls_certificates,
// and always for a bdew partner, whose profile requires mutual TLS).
func checkClientCert(tr *trace, want []*x509.Certificate) *as4.Error {
	if len(want) == 0 && !tr.bdew {
		return nil
	}
	if tr.clientCertErr != nil {
		return as4.FailedAuthentication("the forwarded TLS client certificate is unreadable", tr.clientCertErr)
	}
	if tr.clientCert == nil {
		return as4.FailedAuthentication("the agreement with this partner requires a TLS client certificate; none was presented", nil)
	}
	for _, c := range want {
		if bytes.Equal(c.Raw, tr.clientCert.Raw) {
			return nil
		}
	}
	return as4.FailedAuthentication("the TLS client certificate does not belong to the sending partner", nil)
}
