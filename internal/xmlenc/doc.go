// Package xmlenc implements the XML Encryption part of WS-Security for AS4:
// decryption of received messages and encryption for our own sender.
//
// Supported on receipt (Decrypt):
//   - key transport RSA-OAEP: xmlenc#rsa-oaep-mgf1p (OAEP digest from
//     ds:DigestMethod, default SHA-1, MGF1 always SHA-1, so a SHA-256 digest
//     keeps MGF1-SHA1) and xmlenc11#rsa-oaep (ds:DigestMethod and xenc11:MGF,
//     both default SHA-1; optional OAEPparams);
//   - eDelivery AS4 2.0 key agreement: xenc:AgreementMethod
//     xmldsig-more#x25519 with xenc11:KeyDerivationMethod xmldsig-more#hkdf
//     (dsig-more:HKDFParams: PRF hmac-sha256/384/512, base64 Salt and Info,
//     KeyLength in bytes) and AES key wrap kw-aes128/192/256 (RFC 3394,
//     KeyWrap/KeyUnwrap);
//   - content encryption AES-GCM (12-byte IV ‖ ciphertext ‖ 16-byte tag, no
//     AAD) and AES-CBC (IV ‖ ciphertext, ISO 10126 padding);
//   - EncryptedData of Type SwA Attachment-Content-Only and
//     Attachment-Complete (cid: CipherReference with the
//     Attachment-Ciphertext-Transform), and XML Element/Content (for example
//     the SOAP Body, or a wsse11:EncryptedHeader).
//
// Keys are named by wsse:SecurityTokenReference (X509IssuerSerial,
// KeyIdentifier SKI/ThumbprintSHA1/X509v3, Reference to a
// BinarySecurityToken) or ds:X509Data; elements are matched by namespace,
// never by prefix.
//
// Processing order: WS-Security header blocks are processed in document
// order and senders prepend, so a message that was signed, then encrypted
// (the AS4 norm, and the order Encrypt produces) carries the EncryptedKey
// before the ds:Signature. Call Decrypt first, then verify the signature over
// the decrypted document and attachments, then decompress. Decrypt removes
// the EncryptedKey, the attachment EncryptedData and exhausted ReferenceLists;
// none of them is covered by a signature made before encryption. For a
// message encrypted, then signed (Signature before EncryptedKey), verify
// first.
//
// Errors are *Error values carrying EBMS:0102 (FailedDecryption) or
// EBMS:0103 (PolicyNoncompliance); see the sentinel errors.
package xmlenc
