package as2

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/limits"
	"github.com/edigateway/gateway/internal/smime"
)

// layerFiles are the files a streamed unwrap writes its layers to
// (decoded, decrypted, decompressed), removed when the exchange ends.
type layerFiles struct {
	dir   string
	files []*os.File
}

func (l *layerFiles) create() (*os.File, error) {
	f, err := os.CreateTemp(l.dir, "gateway-layer-*")
	if err != nil {
		return nil, fmt.Errorf("as2: spool: %w", err)
	}
	l.files = append(l.files, f)
	return f, nil
}

func (l *layerFiles) remove() error {
	var errs []error
	for _, f := range l.files {
		f.Close()
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	l.files = nil
	return errors.Join(errs...)
}

// fileSection is a payload that is a byte range of a spool file; Open
// reads it afresh from the file each time.
type fileSection struct {
	path   string
	off, n int64
}

func (s fileSection) Open() (io.ReadCloser, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, s.off, s.n), f}, nil
}

// sectionBody makes the payload body of a streamed result's section, with
// its size and SHA-256: known when the unwrap took it on the way (sum),
// else read once more from the file.
func sectionBody(sec smime.Section, sum []byte) (exchange.Body, int64, string, error) {
	var path string
	switch f := sec.R.(type) {
	case *os.File:
		path = f.Name()
	case *limits.BodyFile:
		path = f.Path()
	case *limits.GrowingBody:
		path = f.Path()
	default:
		return nil, 0, "", fmt.Errorf("as2: payload section over %T", sec.R)
	}
	if sum == nil {
		h := sha256.New()
		if _, err := io.Copy(h, sec.Reader()); err != nil {
			return nil, 0, "", fmt.Errorf("as2: payload: %w", err)
		}
		sum = h.Sum(nil)
	}
	return fileSection{path, sec.Off, sec.N}, sec.N, hex.EncodeToString(sum), nil
}
