package as4

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"
)

// testMessage describes a generated user message.
type testMessage struct {
	messageID   string
	timestamp   string
	fromID      string
	fromType    string
	toID        string
	service     string
	serviceType string
	action      string
	agreement   string
	partInfo    string // PayloadInfo content, verbatim
	extra       string // inserted at the end of eb:UserMessage
	body        string // soap:Body content
}

func defaultTestMessage() testMessage {
	return testMessage{
		messageID:   "a1b2c3@sender.example",
		timestamp:   "2024-05-01T10:00:00.123Z",
		fromID:      "0088:5790000436033",
		fromType:    "urn:oasis:names:tc:ebcore:partyid-type:iso6523",
		toID:        "0088:5790000436040",
		service:     "urn:fdc:peppol.eu:2017:poacc:billing:01:1.0",
		serviceType: "cenbii-procid-ubl",
		action:      "busdox-docid-qns::urn:oasis:names:specification:ubl:schema:xsd:Invoice-2::Invoice",
		agreement:   "urn:fdc:peppol.eu:2017:agreements:tia:ap_provider",
		partInfo: `<eb:PartInfo href="cid:payload-1@sender.example"><eb:PartProperties>` +
			`<eb:Property name="MimeType">application/xml</eb:Property>` +
			`<eb:Property name="CompressionType">application/gzip</eb:Property>` +
			`<eb:Property name="CharacterSet">UTF-8</eb:Property>` +
			`<eb:Property name="OriginalFileName" type="string">invoice.xml</eb:Property>` +
			`</eb:PartProperties></eb:PartInfo>`,
	}
}

func attrIf(name, v string) string {
	if v == "" {
		return ""
	}
	return fmt.Sprintf(` %s="%s"`, name, v)
}

// userMessageXML renders the eb:UserMessage of m (namespace prefix eb bound
// by the caller).
func (m testMessage) userMessageXML() string {
	var b strings.Builder
	b.WriteString(`<eb:UserMessage><eb:MessageInfo>`)
	if m.timestamp != "-" {
		b.WriteString(`<eb:Timestamp>` + m.timestamp + `</eb:Timestamp>`)
	}
	if m.messageID != "-" {
		b.WriteString(`<eb:MessageId>` + m.messageID + `</eb:MessageId>`)
	}
	b.WriteString(`</eb:MessageInfo><eb:PartyInfo><eb:From><eb:PartyId` + attrIf("type", m.fromType) + `>` + m.fromID +
		`</eb:PartyId><eb:Role>http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/initiator</eb:Role></eb:From>` +
		`<eb:To><eb:PartyId type="urn:oasis:names:tc:ebcore:partyid-type:iso6523">` + m.toID +
		`</eb:PartyId><eb:Role>http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/responder</eb:Role></eb:To></eb:PartyInfo>`)
	b.WriteString(`<eb:CollaborationInfo>`)
	if m.agreement != "" {
		b.WriteString(`<eb:AgreementRef>` + m.agreement + `</eb:AgreementRef>`)
	}
	b.WriteString(`<eb:Service` + attrIf("type", m.serviceType) + `>` + m.service + `</eb:Service><eb:Action>` + m.action +
		`</eb:Action><eb:ConversationId>conv-1</eb:ConversationId></eb:CollaborationInfo>`)
	b.WriteString(`<eb:MessageProperties><eb:Property name="originalSender" type="iso6523-actorid-upis">0088:5790000436033</eb:Property>` +
		`<eb:Property name="finalRecipient">0088:5790000436040</eb:Property></eb:MessageProperties>`)
	if m.partInfo != "" {
		b.WriteString(`<eb:PayloadInfo>` + m.partInfo + `</eb:PayloadInfo>`)
	}
	b.WriteString(m.extra + `</eb:UserMessage>`)
	return b.String()
}

// envelopeXML wraps messaging content in a SOAP 1.2 envelope.
func envelopeXML(messagingContent, body string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>` +
		`<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope"><env:Header>` +
		`<eb:Messaging xmlns:eb="http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/" ` +
		`xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" ` +
		`env:mustUnderstand="true" wsu:Id="msg-1">` + messagingContent + `</eb:Messaging></env:Header>` +
		`<env:Body xmlns:wsu="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd" wsu:Id="body-1">` +
		body + `</env:Body></env:Envelope>`
}

func (m testMessage) envelope() string { return envelopeXML(m.userMessageXML(), m.body) }

// testPart is one attachment of a generated multipart message.
type testPart struct {
	cid, contentType, cte string
	body                  []byte
}

// multipartMessage returns the Content-Type and body of a SwA message whose
// root part (first) is soap.
func multipartMessage(boundary, soap string, parts ...testPart) (string, []byte) {
	var b bytes.Buffer
	b.WriteString("preamble to ignore\r\n")
	b.WriteString("--" + boundary + "\r\nContent-Type: application/soap+xml; charset=UTF-8\r\n" +
		"Content-Transfer-Encoding: binary\r\nContent-ID: <root@sender.example>\r\n\r\n" + soap + "\r\n")
	for _, p := range parts {
		b.WriteString("--" + boundary + "\r\nContent-Type: " + p.contentType + "\r\n")
		if p.cte != "" {
			b.WriteString("Content-Transfer-Encoding: " + p.cte + "\r\n")
		}
		if p.cid != "" {
			b.WriteString("Content-ID: <" + p.cid + ">\r\n")
		}
		b.WriteString("\r\n")
		b.Write(p.body)
		b.WriteString("\r\n")
	}
	b.WriteString("--" + boundary + "--\r\n")
	ct := `multipart/related; boundary="` + boundary + `"; type="application/soap+xml"; start="<root@sender.example>"`
	return ct, b.Bytes()
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
