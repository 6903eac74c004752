package endpoint

// EarlyInflations counts the payloads inflated while they were decrypted
// and used (for the external tests).
var EarlyInflations = &earlyInflations
