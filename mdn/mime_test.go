package mdn

import "github.com/edigateway/gateway/internal/smime"

// parseHeaderBlock splits raw after its header block with smime.ParseEntity
// (for the fuzz seeds): the fields and the offset of the body. A block smime
// rejects yields no fields and offset 0.
func parseHeaderBlock(raw []byte) (smime.Header, int) {
	e, err := smime.ParseEntity(raw)
	if err != nil {
		return nil, 0
	}
	return e.Header, len(raw) - len(e.Body)
}
