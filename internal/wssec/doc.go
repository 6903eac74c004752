// Package wssec implements the WS-Security 1.1.1 signature processing an AS4
// message handler needs: verification of the ds:Signature in the
// wsse:Security header of a SOAP 1.1/1.2 envelope (with SwA attachment
// references), and the signing side for our own user messages, receipts and
// errors.
//
// The package works on a parsed envelope (an *etree.Document, best obtained
// from ParseEnvelope, which refuses DTDs and bounds size and depth) and on the
// already decrypted attachments of the message. It never searches the
// document by prefix: every element and attribute is matched by namespace.
//
// Signature-wrapping defence: ids are looked up in a namespace-aware index
// that rejects duplicates anywhere in the document, and the elements a caller
// must process (eb:Messaging, soap:Body) are returned in Result as the very
// elements that were digested. Callers must use Result.Messaging and
// Result.Body instead of searching the document again.
package wssec
