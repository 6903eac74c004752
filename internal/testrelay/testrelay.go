// Package testrelay is for tests that put a recording or tampering relay
// between a sender and a served gateway: Forward passes one request on
// and the answer back.
package testrelay

import (
	"bytes"
	"io"
	"net/http"
)

// Forward sends body with r's method and headers to target and writes the
// answer (status, headers, body) to w; a request that cannot be made or
// sent is answered 502.
func Forward(w http.ResponseWriter, r *http.Request, target string, body []byte) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
