package endpoint

// EarlyInflations counts the payloads inflated while they were decrypted
// and used (for the external tests).
var EarlyInflations = &earlyInflations

// ArrivingAttachments counts the messages whose payload attachment was
// decrypted while it arrived (for the external tests).
var ArrivingAttachments = &arrivingAttachments
