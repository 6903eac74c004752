package wssec

// Namespaces matched by the package.
const (
	NamespaceSOAP12  = "http://www.w3.org/2003/05/soap-envelope"
	NamespaceSOAP11  = "http://schemas.xmlsoap.org/soap/envelope/"
	NamespaceWSSE    = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
	NamespaceWSSE11  = "http://docs.oasis-open.org/wss/oasis-wss-wssecurity-secext-1.1.xsd"
	NamespaceWSU     = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
	NamespaceDSig    = "http://www.w3.org/2000/09/xmldsig#"
	NamespaceExcC14N = "http://www.w3.org/2001/10/xml-exc-c14n#"
	NamespaceEbMS    = "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/"
	namespaceXML     = "http://www.w3.org/XML/1998/namespace"
)

// SOAP 1.2 role of the ultimate receiver; a wsse:Security header with this
// role (or with none) is addressed to us.
const roleUltimateReceiver = "http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver"

// Canonicalization algorithms (CanonicalizationMethod and Transform).
const (
	AlgExcC14N             = "http://www.w3.org/2001/10/xml-exc-c14n#"
	AlgExcC14NWithComments = "http://www.w3.org/2001/10/xml-exc-c14n#WithComments"
	AlgC14N10              = "http://www.w3.org/TR/2001/REC-xml-c14n-20010315"
	AlgC14N10WithComments  = "http://www.w3.org/TR/2001/REC-xml-c14n-20010315#WithComments"
	AlgC14N11              = "http://www.w3.org/2006/12/xml-c14n11"
	AlgC14N11WithComments  = "http://www.w3.org/2006/12/xml-c14n11#WithComments"
)

// Reference transforms other than canonicalization.
const (
	AlgEnvelopedSignature = "http://www.w3.org/2000/09/xmldsig#enveloped-signature"
	// AlgAttachmentContentSignature digests the attachment content only
	// (OASIS WSS SwA profile 1.1 §5.3.1); the transform every AS4 profile uses.
	AlgAttachmentContentSignature = "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Signature-Transform"
	// AlgAttachmentCompleteSignature digests the canonical MIME headers
	// followed by the content (SwA profile 1.1 §5.3.2).
	AlgAttachmentCompleteSignature = "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Complete-Signature-Transform"
)

// Signature methods.
const (
	AlgRSASHA1      = "http://www.w3.org/2000/09/xmldsig#rsa-sha1"
	AlgRSASHA256    = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"
	AlgRSASHA384    = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha384"
	AlgRSASHA512    = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha512"
	AlgECDSASHA256  = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256"
	AlgECDSASHA384  = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384"
	AlgECDSASHA512  = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha512"
	AlgEdDSAEd25519 = "http://www.w3.org/2021/04/xmldsig-more#eddsa-ed25519"
)

// Digest methods.
const (
	AlgSHA1   = "http://www.w3.org/2000/09/xmldsig#sha1"
	AlgSHA256 = "http://www.w3.org/2001/04/xmlenc#sha256"
	AlgSHA384 = "http://www.w3.org/2001/04/xmldsig-more#sha384"
	AlgSHA512 = "http://www.w3.org/2001/04/xmlenc#sha512"
)

// WS-Security token types and encodings.
const (
	ValueTypeX509v3 = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3"
	// ValueTypeX509PKIPathv1 is a PkiPath (SEQUENCE OF Certificate, the
	// signer last), the token type of the BDEW AS4 profile.
	ValueTypeX509PKIPathv1 = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509PKIPathv1"
	ValueTypeX509SKI       = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509SubjectKeyIdentifier"
	ValueTypeThumbprintSHA = "http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1"
	EncodingBase64Binary   = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary"
)
