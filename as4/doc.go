// Package as4 is the ebMS 3.0 / AS4 message layer shared by the receiving
// endpoint (package as4/endpoint) and the sender (package as4/client): it
// reads a message off the wire (ReadMessage: SOAP 1.1 or 1.2, bare or with
// SOAP-with-attachments MIME parts, within Limits), parses the
// eb:Messaging header into a UserMessage or SignalMessage (ParseMessaging),
// resolves each eb:PartInfo to its attachment or SOAP body element
// (ResolvePayloads), inflates gzip-compressed payloads within an inflation
// budget (DecompressLimited, DecompressReader), selects the receiving
// P-Mode for a user message by agreement, service, action, parties and
// roles (Match), and names every ebMS error of ebMS 3.0 Core §6.7 and the
// AS4 profile as an *Error carrying its EBMS:nnnn code, category and
// severity (CodeOf, AsError).
//
// Security (WS-Security signatures and XML Encryption) is in packages
// wssec and xmlenc; receipts and error signals are built by package receipt.
package as4
