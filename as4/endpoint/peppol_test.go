package endpoint_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"

	"github.com/edigateway/gateway/as4"
	"github.com/edigateway/gateway/as4/client"
	"github.com/edigateway/gateway/internal/peppol"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/internal/trust/trusttest"
	"github.com/edigateway/gateway/internal/wssec"
)

const (
	pplProcess = "urn:fdc:peppol.eu:2017:poacc:billing:01:1.0"
	pplDocType = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2::Invoice##urn:cen.eu:en16931:2017#compliant#urn:fdc:peppol.eu:2017:poacc:billing:3.0::2.1"
	pplSender  = "0088:5798000000001"
	ourSeat    = "POP000999"
)

var ourParticipants = []string{"0088:5790000435975", "0184:DK12345678"}

func sbdh(sender, receiver, docType, process, c1 string) []byte {
	return []byte(fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<StandardBusinessDocument xmlns="http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader">
  <StandardBusinessDocumentHeader>
    <HeaderVersion>1.0</HeaderVersion>
    <Sender><Identifier Authority="iso6523-actorid-upis">%s</Identifier></Sender>
    <Receiver><Identifier Authority="iso6523-actorid-upis">%s</Identifier></Receiver>
    <DocumentIdentification>
      <Standard>urn:oasis:names:specification:ubl:schema:xsd:Invoice-2</Standard>
      <TypeVersion>2.1</TypeVersion>
      <InstanceIdentifier>inst-%s</InstanceIdentifier>
      <Type>Invoice</Type>
      <CreationDateAndTime>2026-12-01T10:00:00Z</CreationDateAndTime>
    </DocumentIdentification>
    <BusinessScope>
      <Scope><Type>DOCUMENTID</Type><InstanceIdentifier>%s</InstanceIdentifier><Identifier>busdox-docid-qns</Identifier></Scope>
      <Scope><Type>PROCESSID</Type><InstanceIdentifier>%s</InstanceIdentifier><Identifier>cenbii-procid-ubl</Identifier></Scope>
      <Scope><Type>COUNTRY_C1</Type><InstanceIdentifier>%s</InstanceIdentifier></Scope>
    </BusinessScope>
  </StandardBusinessDocumentHeader>
  <Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"><ID xmlns="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">INV-1</ID></Invoice>
</StandardBusinessDocument>
`, sender, receiver, receiver, docType, process, c1))
}

// TestPeppolAccessPoint is the end-to-end Peppol corner 3: a generated
// OpenPeppol-like hierarchy (root → AP CA → AP certificates), two sending
// access points that have no partner file, SBDH payloads; consistent
// messages are accepted, each inconsistency is refused with the code an AP
// expects, and the month's TSR and EUSR are written for the accepted ones.
func TestPeppolAccessPoint(t *testing.T) {
	t.Parallel()
	k := getKeys(t)
	root := trusttest.NewRoot(t, "Peppol Root TEST CA")
	apCA := root.NewIntermediate(t, "Peppol ACCESS POINT TEST CA")
	crls := trusttest.ServeFiles(t)
	crlURL := crls.URL + "/ap.crl"
	ap := func(cn string) trusttest.Issued {
		return apCA.Issue(t, trusttest.Leaf{CommonName: cn, Organization: []string{"Sender AP " + cn}, CRL: crlURL})
	}
	ap1, ap2, revokedAP := ap("POP000001"), ap("POP000002"), ap("POP000004")
	rogueRoot := trusttest.NewRoot(t, "Peppol ACCESS POINT TEST CA") // same name, other key
	rogue := rogueRoot.Issue(t, trusttest.Leaf{CommonName: "POP000003"})
	now := time.Now()
	crls.Set("/ap.crl", apCA.CRL(t, now.Add(-time.Hour), now.Add(time.Hour), revokedAP.Cert))

	reports := t.TempDir()
	rec := &peppol.Recorder{Dir: filepath.Join(reports, "records")}
	pap, err := peppol.New(peppol.Settings{APCA: []*x509.Certificate{root.Cert, apCA.Cert}, Participants: ourParticipants,
		Revocation: trust.Revocation{Mode: trust.ModeCRL, Policy: trust.PolicyHard}, ReporterID: ourSeat, Country: "DK", Records: rec})
	if err != nil {
		t.Fatal(err)
	}
	// The only partner file is acme's: no AP is configured as a partner.
	h := newHarness(t, harnessOptions{peppol: pap, party: as4.PartyID{Value: ourSeat, Type: peppol.PartyTypeAP}})

	type msg struct {
		from                 trusttest.Issued
		fromID               string
		origSender, finalRcp string
		sbdhSender, sbdhRcpt string
		service, action      string
		payload              []byte // replaces the SBDH
		issuerSerial         bool   // KeyInfo by IssuerSerial instead of the BST reference
		plain                bool   // not encrypted
	}
	good := func(from trusttest.Issued, rcpt string) msg {
		cn := from.Cert.Subject.CommonName
		return msg{from: from, fromID: cn, origSender: pplSender, finalRcp: rcpt, sbdhSender: pplSender, sbdhRcpt: rcpt,
			service: pplProcess, action: "busdox-docid-qns::" + pplDocType}
	}
	var c *client.Client
	build := func(id string, m msg) *client.Outgoing {
		c = rsaClient(k)
		if m.plain {
			c.Encryption = nil
		}
		c.Signer, c.Certificate = m.from.Key, m.from.Cert
		payload := m.payload
		if payload == nil {
			payload = sbdh(m.sbdhSender, m.sbdhRcpt, pplDocType, pplProcess, "NO")
		}
		cm := &client.Message{
			MessageID: id,
			From:      as4.PartyID{Value: m.fromID, Type: peppol.PartyTypeAP}, To: as4.PartyID{Value: ourSeat, Type: peppol.PartyTypeAP},
			Service: m.service, ServiceType: peppol.ProcessScheme, Action: m.action,
			Properties: []as4.Property{{Name: "originalSender", Type: peppol.ParticipantScheme, Value: m.origSender},
				{Name: "finalRecipient", Type: peppol.ParticipantScheme, Value: m.finalRcp}},
			Payloads: []client.Payload{{MimeType: "application/xml", Data: payload, Compress: true}},
		}
		out, err := c.Build(cm)
		if err != nil {
			t.Fatal(err)
		}
		if m.issuerSerial {
			mm := splitMIME(t, out)
			mm.editSOAP(t, func(doc *etree.Document) { keyInfoByIssuerSerial(t, doc, m.from.Cert) })
			out = mm.join(t, out)
		}
		return out
	}
	send := func(id string, m msg) (*client.Response, error) {
		return c.Post(context.Background(), h.url, build(id, m))
	}

	// Accepted: two APs never configured as partners, to two of our
	// participants; the second message is sent twice (a retransmission).
	if _, err := send("ok-1@peppol.test", good(ap1, ourParticipants[0])); err != nil {
		t.Fatalf("consistent message from POP000001 refused: %v", err)
	}
	out := build("ok-2@peppol.test", good(ap2, ourParticipants[1]))
	for i := range 2 {
		if _, err := c.Post(context.Background(), h.url, out); err != nil {
			t.Fatalf("consistent message from POP000002 (attempt %d) refused: %v", i+1, err)
		}
	}
	if n := len(h.handler.delivered()); n != 2 {
		t.Fatalf("handler got %d messages, want 2", n)
	}

	refused := []struct {
		name string
		edit func(*msg)
		code string
		text string
	}{
		{"from party id is not the certificate's CN", func(m *msg) { m.fromID = "POP000002" }, as4.CodeFailedAuthentication, `not the eb:From PartyId "POP000002"`},
		{"certificate of another CA", func(m *msg) { m.from, m.fromID = rogue, "POP000003" }, as4.CodeFailedAuthentication, "does not chain to a configured CA"},
		{"revoked AP certificate", func(m *msg) { m.from, m.fromID = revokedAP, "POP000004" }, as4.CodeFailedAuthentication, "is revoked"},
		{"signer not a BinarySecurityToken reference", func(m *msg) { m.issuerSerial = true }, as4.CodeFailedAuthentication, "BinarySecurityToken"},
		{"originalSender is not the SBDH sender", func(m *msg) { m.origSender = "0088:5798000000002" }, "EBMS:0004", "originalSender"},
		{"finalRecipient is not the SBDH receiver", func(m *msg) { m.finalRcp = ourParticipants[1] }, "EBMS:0004", "finalRecipient"},
		{"receiver not served here", func(m *msg) { m.finalRcp, m.sbdhRcpt = "0088:1111111111111", "0088:1111111111111" }, peppol.CodeNotServiced, "not served by this access point"},
		{"service is not the SBDH process", func(m *msg) { m.service = "urn:fdc:peppol.eu:2017:poacc:ordering:01:1.0" }, "EBMS:0004", "eb:Service"},
		{"action is not the SBDH document type", func(m *msg) { m.action = "busdox-docid-qns::urn:other" }, "EBMS:0004", "eb:Action"},
		{"no SBDH", func(m *msg) { m.payload = invoiceXML }, "EBMS:0004", "SBDH"},
		{"not encrypted", func(m *msg) { m.plain = true }, as4.CodePolicyNoncompliance, "not encrypted"},
	}
	for i, tc := range refused {
		m := good(ap1, ourParticipants[0])
		tc.edit(&m)
		resp, err := send(fmt.Sprintf("bad-%d@peppol.test", i), m)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		t.Run(tc.name, func(t *testing.T) { refusal(t, h, resp, tc.code, tc.text) })
	}
	if n := len(h.handler.delivered()); n != 2 {
		t.Fatalf("handler got %d messages after the refusals, want 2", n)
	}

	// The month's reports: the two accepted transactions, the retransmission once.
	month := now.UTC().Format("2006-01")
	paths, n, err := peppol.WriteReports(rec, month, ourSeat, reports)
	if err != nil || n != 2 || len(paths) != 2 {
		t.Fatalf("reports %v, %d transactions: %v", paths, n, err)
	}
	eusr, _ := os.ReadFile(paths[0])
	tsr, _ := os.ReadFile(paths[1])
	for _, want := range []string{
		`<TransactionStatisticsReport xmlns="urn:fdc:peppol:transaction-statistics-report:1.0">`,
		"<CustomizationID>urn:fdc:peppol.eu:edec:trns:transaction-statistics-reporting:1.0</CustomizationID>",
		`<ReporterID schemeID="CertSubjectCN">POP000999</ReporterID>`,
		"<Total>\n    <Incoming>2</Incoming>\n    <Outgoing>0</Outgoing>",
		`<Key metaSchemeID="TP" schemeID="Peppol">peppol-transport-as4-v2_0</Key>`,
		`<Key metaSchemeID="SP" schemeID="CertSubjectCN">POP000001</Key>`,
		`<Key metaSchemeID="SP" schemeID="CertSubjectCN">POP000002</Key>`,
		`<Key metaSchemeID="DT" schemeID="busdox-docid-qns">` + pplDocType + `</Key>`,
		`<Key metaSchemeID="CC" schemeID="SenderCountry">NO</Key>`,
		`<Key metaSchemeID="CC" schemeID="ReceiverCountry">DK</Key>`,
	} {
		if !strings.Contains(string(tsr), want) {
			t.Errorf("TSR lacks %s:\n%s", want, tsr)
		}
	}
	for _, want := range []string{
		`<EndUserStatisticsReport xmlns="urn:fdc:peppol:end-user-statistics-report:1.1">`,
		"<StartDate>" + month + "-01</StartDate>",
		"<FullSet>\n    <SendingEndUsers>0</SendingEndUsers>\n    <ReceivingEndUsers>2</ReceivingEndUsers>\n    <SendingOrReceivingEndUsers>2</SendingOrReceivingEndUsers>",
		`<Subset type="PerEUC">`,
		`<Key metaSchemeID="CC" schemeID="EndUserCountry">DK</Key>`,
	} {
		if !strings.Contains(string(eusr), want) {
			t.Errorf("EUSR lacks %s:\n%s", want, eusr)
		}
	}
	if strings.Count(string(tsr), `<Subtotal type="PerSP-DT-PR">`) != 2 {
		t.Errorf("TSR has not one PerSP-DT-PR subtotal per sending AP:\n%s", tsr)
	}
}

// keyInfoByIssuerSerial replaces the signature's BinarySecurityToken
// reference with ds:X509Data/ds:X509IssuerSerial (KeyInfo is not signed).
func keyInfoByIssuerSerial(t *testing.T, doc *etree.Document, c *x509.Certificate) {
	t.Helper()
	ki := find(find(doc.Root(), wssec.NamespaceDSig, "Signature"), wssec.NamespaceDSig, "KeyInfo")
	for _, ch := range ki.ChildElements() {
		ki.RemoveChild(ch)
	}
	xd := ki.CreateElement(ki.Space + ":X509Data")
	is := xd.CreateElement(ki.Space + ":X509IssuerSerial")
	is.CreateElement(ki.Space + ":X509IssuerName").SetText(c.Issuer.String())
	is.CreateElement(ki.Space + ":X509SerialNumber").SetText(c.SerialNumber.String())
}
