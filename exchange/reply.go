package exchange

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Reply is what the gateway answers a partner with: an HTTP status, headers
// and body. For asynchronous replies (AS2 async MDN) the protocol package
// delivers the body elsewhere and answers the HTTP request itself.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	// Disposition names the reply for audit: an MDN disposition, "receipt",
	// an ebMS error code, or "http-503".
	Disposition string
	// Incident is the incident reference of a negative reply (NewIncident),
	// for protocols that must repeat it elsewhere (AS2 without an MDN
	// answers with a plain HTTP status). It is not stored.
	Incident string
}

type storedReply struct {
	V           int         `json:"v"`
	Status      int         `json:"status"`
	Header      http.Header `json:"header,omitempty"`
	Body        []byte      `json:"body"`
	Disposition string      `json:"disposition,omitempty"`
}

// EncodeReply serialises a reply for the store, so that a duplicate can be
// answered from exactly what was sent the first time.
func EncodeReply(r Reply) ([]byte, error) {
	return json.Marshal(storedReply{V: 1, Status: r.Status, Header: r.Header, Body: r.Body, Disposition: r.Disposition})
}

// DecodeReply is the inverse of EncodeReply.
func DecodeReply(b []byte) (Reply, error) {
	var s storedReply
	if err := json.Unmarshal(b, &s); err != nil {
		return Reply{}, fmt.Errorf("exchange: decode stored reply: %w", err)
	}
	if s.V != 1 {
		return Reply{}, fmt.Errorf("exchange: decode stored reply: unknown version %d", s.V)
	}
	if s.Body == nil {
		s.Body = []byte{}
	}
	return Reply{Status: s.Status, Header: s.Header, Body: s.Body, Disposition: s.Disposition}, nil
}

// Write sends the reply on an HTTP response.
func (r Reply) Write(w http.ResponseWriter) {
	for k, v := range r.Header {
		w.Header()[k] = append([]string(nil), v...)
	}
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}
