// Package certs is the one home of the gateway's certificate and key
// files: it reads certificates and private keys in the formats vendors ship
// (PEM, DER and PKCS#12 .p12/.pfx, legacy RC2/3DES as well as the
// AES-256/PBKDF2 files OpenSSL 3 writes by default; passwords come from an
// environment variable or a file, never from the configuration itself), and
// it checks the certificates the gateway relies on (partner certificates
// from the partner directory and the certificates of our identity keys:
// expiry, not-yet-valid, short RSA keys, a key that does not belong to its
// certificate). `gateway partners check` prints its findings; `serve` logs
// them at start, after every reload and daily.
//
// Every file error names the file and says what is wrong (ErrWrongPassword,
// ErrNoKey, ErrNoCertificate, ErrKeyMismatch). Judging a certificate for a
// message (dates at signing time, chains, revocation) is package trust's.
package certs
