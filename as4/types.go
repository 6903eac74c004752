package as4

import "github.com/edigateway/gateway/internal/limits"

// Inflation bounds the output of a decompressor (DecompressLimited,
// DecompressReader): MaxBytes caps the inflated size, MaxRatio the inflated
// ÷ compressed ratio past RatioFloor, and outputs beyond the memory threshold
// spool to SpoolDir.
type Inflation = limits.Inflation
