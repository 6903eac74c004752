// Package limits bounds what a partner's bytes may cost the gateway before
// they are authenticated: a process-wide memory budget shared by every
// endpoint, request bodies counted as they are read and cut off when they
// arrive too slowly, and a bounded collector that inflates or reads into a
// spool file in fixed-size chunks and allocates the result exactly once,
// never doubling a buffer past its cap.
package limits

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Sentinels wrapped by the errors of this package; Status maps them to
// the HTTP status the partner gets.
var (
	// ErrTooLarge: a body or inflated output over its size limit (413), or
	// a request that needs more memory than the whole budget.
	ErrTooLarge = errors.New("too large")
	// ErrRatio: inflated output beyond the expansion-ratio cap.
	ErrRatio = errors.New("expansion ratio exceeded")
	// ErrBusy: the memory budget is taken by other requests (503).
	ErrBusy = errors.New("memory budget exhausted")
	// ErrTooSlow: the body arrived below the minimum transfer rate (408).
	ErrTooSlow = errors.New("body arrives too slowly")
)

// ChunkSize is the unit in which Collect reads.
const ChunkSize = 32 << 10

// DefaultMemThreshold is the output size up to which Collect keeps bytes in
// memory while reading when the final size is not known in advance.
const DefaultMemThreshold = 1 << 20

// Collect options.
type CollectOptions struct {
	// Max is the most bytes accepted; more fail with an error wrapping
	// ErrTooLarge as soon as they are read (Max <= 0: no limit).
	Max int64
	// SizeHint, when positive and within Max, is the expected size: the
	// in-memory buffer is allocated once at exactly that size.
	SizeHint int64
	// MemThreshold bounds the buffer kept in memory while reading; beyond
	// it the bytes go to a spool file (0: DefaultMemThreshold).
	MemThreshold int64
	// SpoolDir holds the spool file ("" = system temporary directory). The
	// file is unlinked as soon as it is created.
	SpoolDir string
	// Check, when set, is called with the running total after every chunk;
	// an error stops reading and is returned as is.
	Check func(total int64) error
}

// Collect reads r to its end in ChunkSize pieces and returns the bytes in
// one allocation of exactly their length. Up to MemThreshold (or SizeHint)
// bytes are buffered in memory; past it they go to an unlinked spool file
// that is read back once at the end. Limits are checked after every chunk,
// so a hostile stream is refused after at most one chunk over its limit.
func Collect(r io.Reader, o CollectOptions) ([]byte, error) {
	memLimit := o.MemThreshold
	if memLimit <= 0 {
		memLimit = DefaultMemThreshold
	}
	var mem []byte
	if o.SizeHint > 0 && (o.Max <= 0 || o.SizeHint <= o.Max) {
		memLimit = o.SizeHint
		mem = make([]byte, 0, o.SizeHint)
	}
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	buf := make([]byte, ChunkSize)
	var total int64
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			total += int64(k)
			if o.Max > 0 && total > o.Max {
				return nil, fmt.Errorf("more than %d bytes: %w", o.Max, ErrTooLarge)
			}
			if o.Check != nil {
				if err := o.Check(total); err != nil {
					return nil, err
				}
			}
			switch need := len(mem) + k; {
			case f == nil && int64(need) <= memLimit:
				if need > cap(mem) {
					// Grow below the threshold only, never past it.
					nc := int64(max(2*cap(mem), need, 4096))
					nm := make([]byte, len(mem), min(nc, memLimit))
					copy(nm, mem)
					mem = nm
				}
				mem = append(mem, buf[:k]...)
			default:
				if f == nil {
					var err error
					if f, err = spoolFile(o.SpoolDir); err != nil {
						return nil, err
					}
					if _, err := f.Write(mem); err != nil {
						return nil, fmt.Errorf("limits: spool: %w", err)
					}
					mem = nil
				}
				if _, err := f.Write(buf[:k]); err != nil {
					return nil, fmt.Errorf("limits: spool: %w", err)
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	if f == nil {
		return mem, nil
	}
	out := make([]byte, total)
	if _, err := f.ReadAt(out, 0); err != nil && !(errors.Is(err, io.EOF)) {
		return nil, fmt.Errorf("limits: spool read back: %w", err)
	}
	return out, nil
}

func spoolFile(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "gateway-collect-*")
	if err != nil {
		return nil, fmt.Errorf("limits: spool: %w", err)
	}
	// Unlinked at once: nothing is left behind, even after a crash.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("limits: spool: %w", err)
	}
	return f, nil
}

// Inflation bounds the output of a decompressor.
type Inflation struct {
	// MaxBytes is the absolute cap on the inflated size (0: no cap).
	MaxBytes int64
	// MaxRatio caps inflated ÷ compressed bytes once the output is past
	// RatioFloor (0: no ratio cap).
	MaxRatio float64
	// RatioFloor is the output size below which the ratio is not checked
	// (0: DefaultRatioFloor), so that small, very compressible documents pass.
	RatioFloor int64
	// SpoolDir holds outputs beyond DefaultMemThreshold while inflating.
	SpoolDir string
}

// Defaults for inflation.
const (
	DefaultMaxDecompressedBytes = 4 << 30
	DefaultMaxCompressionRatio  = 200
	DefaultRatioFloor           = 1 << 20
	DefaultMaxCompressedLayers  = 3
)

// CheckRatio returns an error wrapping ErrRatio when out bytes inflated from
// in compressed bytes exceed the ratio cap.
func (l Inflation) CheckRatio(out, in int64) error {
	floor := l.RatioFloor
	if floor <= 0 {
		floor = DefaultRatioFloor
	}
	if l.MaxRatio > 0 && out > floor && float64(out) > l.MaxRatio*float64(max(in, 1)) {
		return fmt.Errorf("%d compressed bytes inflate beyond %d bytes, more than %g times: %w", in, out, l.MaxRatio, ErrRatio)
	}
	return nil
}

// Inflate reads the decompressor r (over compressedLen input bytes) to its
// end under l; extra, when set, is called with the running output size too
// (for limits across several layers).
func (l Inflation) Inflate(r io.Reader, compressedLen int64, extra func(total int64) error) ([]byte, error) {
	return Collect(r, CollectOptions{
		Max:      l.MaxBytes,
		SpoolDir: l.SpoolDir,
		Check: func(total int64) error {
			if err := l.CheckRatio(total, compressedLen); err != nil {
				return err
			}
			if extra != nil {
				return extra(total)
			}
			return nil
		},
	})
}
