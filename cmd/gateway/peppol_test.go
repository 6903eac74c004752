package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/internal/peppol"
)

// `gateway peppol report` writes the month's TSR and EUSR from the records
// the AS4 endpoint keeps in peppol.report_dir (the end-to-end test through
// the endpoint is as4/endpoint TestPeppolAccessPoint).
func TestPeppolReportCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(`store: "memory:"
peppol:
  enabled: true
  ap_ca: [ap-ca.pem]
  participants: ["0088:5790000435975"]
  reporter_id: POP000999
  country: DK
  report_dir: records
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &peppol.Recorder{Dir: filepath.Join(dir, "records")}
	at := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	for _, id := range []string{"m1", "m2", "m2"} {
		if err := rec.Add(&peppol.Transaction{Time: at, MessageID: id, Direction: "incoming", C2: "POP000001", DocType: "doc", Process: "proc",
			C1Country: "SE", C4Country: "DK", Sender: "iso6523-actorid-upis::0088:1", Receiver: "iso6523-actorid-upis::0088:5790000435975"}); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"peppol", "report", "-config", cfg, "-month", "2026-11", "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "2 transactions in 2026-11") {
		t.Fatalf("stdout: %s", stdout.String())
	}
	tsr, err := os.ReadFile(filepath.Join(out, "tsr-2026-11.xml"))
	if err != nil || !strings.Contains(string(tsr), "<Incoming>2</Incoming>") || !strings.Contains(string(tsr), "<EndDate>2026-11-30</EndDate>") {
		t.Fatalf("tsr %v:\n%s", err, tsr)
	}
	eusr, err := os.ReadFile(filepath.Join(out, "eusr-2026-11.xml"))
	if err != nil || !strings.Contains(string(eusr), "<ReceivingEndUsers>1</ReceivingEndUsers>") {
		t.Fatalf("eusr %v:\n%s", err, eusr)
	}
	if code := run([]string{"peppol", "report", "-config", cfg, "-month", "2026-13", "-out", out}, &stdout, &stderr); code == 0 {
		t.Fatal("bad month accepted")
	}
}
