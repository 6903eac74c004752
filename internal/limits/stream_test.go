package limits

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A body over StreamAbove reserves StreamReserve, not its size ×
// Amplification: a 100 MiB body is admitted under a 64 MiB budget; one of
// unknown length stops growing its reservation past StreamAbove.
func TestStreamedBodiesReserveAConstant(t *testing.T) {
	budget := NewBudget(64 << 20)
	var held int64
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		held = ReservationFrom(r.Context()).Held()
		if err != nil {
			Refuse(w, err)
			return
		}
		io.WriteString(w, strings.Repeat("x", int(n%7)))
	}), BodyOptions{Budget: budget, StreamAbove: 8 << 20, StreamReserve: 4 << 20}))
	defer srv.Close()
	for _, chunked := range []bool{false, true} {
		var body io.Reader = io.LimitReader(zeros{}, 100<<20)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		req.ContentLength = 100 << 20
		if chunked {
			req, _ = http.NewRequest(http.MethodPost, srv.URL, struct{ io.Reader }{body})
			req.ContentLength = -1
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chunked=%v: HTTP %d, want 200", chunked, resp.StatusCode)
		}
		want := int64(4 << 20)
		if chunked {
			want = (8<<20 + chunkedStep) * DefaultAmplification // grown until past StreamAbove, then no more
		}
		if held > want || held == 0 {
			t.Fatalf("chunked=%v: %d bytes reserved, want at most %d", chunked, held, want)
		}
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes still reserved", budget.Used())
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
