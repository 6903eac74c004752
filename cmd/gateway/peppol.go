package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/peppol"
)

// peppolReport writes the month's OpenPeppol Transaction Statistics Report
// and End User Statistics Report from the recorded transactions.
func peppolReport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("peppol report", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	month := fs.String("month", "", "reporting month YYYY-MM (default: the previous month, UTC)")
	out := fs.String("out", ".", "directory for tsr-YYYY-MM.xml and eusr-YYYY-MM.xml")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cfgPath == "" {
		return errors.New("peppol report: no configuration (-config or $GATEWAY_CONFIG)")
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if !cfg.Peppol.Enabled {
		return fmt.Errorf("peppol report: %s: peppol.enabled is off", *cfgPath)
	}
	m := *month
	if m == "" {
		m = time.Now().UTC().AddDate(0, -1, 0).Format("2006-01")
	}
	paths, n, err := peppol.WriteReports(&peppol.Recorder{Dir: cfg.Peppol.ReportDir}, m, cfg.Peppol.ReporterID, *out)
	if err != nil {
		return fmt.Errorf("peppol report: %w", err)
	}
	fmt.Fprintf(stdout, "%d transactions in %s\n", n, m)
	for _, p := range paths {
		fmt.Fprintln(stdout, "wrote", p)
	}
	return nil
}
