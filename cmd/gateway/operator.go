package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/internal/trust"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/server"
)

// partnersList prints every partner: protocols, ids, certificates with
// their expiry, dedup and retry windows.
func partnersList(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("partners list", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	dir := fs.String("dir", "", "partner directory (default: the config's partners setting)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path := *dir
	if path == "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		path = cfg.Partners
	}
	d, err := partners.Load(path)
	if err != nil {
		return err
	}
	now := time.Now()
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PARTNER\tPROTOCOL\tID\tDEDUP WINDOW\tRETRY WINDOW\tCERTIFICATES")
	for _, p := range d.Partners {
		if p.AS2 != nil {
			fmt.Fprintf(w, "%s\tas2\t%s\t%s\t%s\t%s\n", p.ID, p.AS2.ID, window(p.AS2.DedupWindow), window(p.AS2.RetryWindow),
				certList(d.AS2Certificates(p), now))
		}
		if p.AS4 != nil {
			id := p.AS4.PartyID
			if p.AS4.PartyType != "" {
				id = p.AS4.PartyType + ":" + id
			}
			fmt.Fprintf(w, "%s\tas4\t%s\t%s\t%s\t%s\n", p.ID, id, window(p.AS4.DedupWindow), window(p.AS4.RetryWindow),
				certList(d.AS4Certificates(p), now))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d partners\n", len(d.Partners))
	return nil
}

func window(d partners.Duration) string {
	if d == 0 {
		return "store retention"
	}
	return d.Std().String()
}

// certList names each certificate with its expiry: "CN=x (serial 1F,
// expires 2027-03-01, in 89 days)".
func certList(certs []*x509.Certificate, now time.Time) string {
	if len(certs) == 0 {
		return "-"
	}
	var out []string
	for _, c := range certs {
		left := c.NotAfter.Sub(now)
		when := fmt.Sprintf("in %d days", int(left.Hours()/24))
		if left < 0 {
			when = "EXPIRED"
		}
		out = append(out, fmt.Sprintf("%s (serial %s, expires %s, %s)", c.Subject.String(), trust.Serial(c),
			c.NotAfter.UTC().Format("2006-01-02"), when))
	}
	return strings.Join(out, "; ")
}

// decisions are the values of `gateway messages -decision`.
var decisions = []string{"accepted", "duplicate", "duplicate-interchange", "drift", "quarantined", "rejected",
	"in-flight", "unavailable", "abandoned", "error"}

// messages prints the most recent messages from the audit: one line per
// message with the record that settled it.
func messages(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("messages", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	partner := fs.String("partner", "", "only this partner id")
	since := fs.Duration("since", 24*time.Hour, "only messages of this last period (0: all)")
	decision := fs.String("decision", "", "only this decision: "+strings.Join(decisions, ", "))
	limit := fs.Int("limit", 50, "at most this many messages, the most recent")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *decision != "" && !slices.Contains(decisions, *decision) {
		return fmt.Errorf("%w: -decision %q is not one of %s", errUsage, *decision, strings.Join(decisions, ", "))
	}
	if *limit <= 0 {
		return fmt.Errorf("%w: -limit must be positive", errUsage)
	}
	ctx := context.Background()
	_, be, err := openBackend(ctx, "messages", *cfgPath)
	if err != nil {
		return err
	}
	defer be.Close()
	reader, ok := be.AuditSink().(audit.Reader)
	if !ok {
		return errors.New("this store's audit sink cannot be read back")
	}
	q := audit.Query{Partner: *partner, Newest: true, Limit: 1000}
	if *since > 0 {
		q.From = time.Now().Add(-*since)
	}
	// Pages go back in time until enough messages are found; a message
	// writes about four records, so a page of 1000 is ~250 messages.
	var rows []audit.Record
	var decided []string
	const maxRecords = 200000
	for scanned := 0; len(rows) < *limit && scanned < maxRecords; {
		page, err := reader.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("read audit: %w", err)
		}
		for _, r := range page {
			d, ok := server.Settled(r)
			if !ok || (*decision != "" && d != *decision) {
				continue
			}
			rows, decided = append(rows, r), append(decided, d)
			if len(rows) == *limit {
				break
			}
		}
		scanned += len(page)
		if len(page) < q.Limit {
			break
		}
		q.To = page[len(page)-1].Time
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tPARTNER\tPROTOCOL\tMESSAGE ID\tDECISION\tREFERENCE\tDISPOSITION")
	for i := len(rows) - 1; i >= 0; i-- { // oldest first, like a log
		r := rows[i]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.UTC().Format(time.RFC3339), dash(r.Partner), r.Protocol,
			dash(r.MessageID), decided[i], dash(r.Reference), dash(r.Disposition))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d messages\n", len(rows))
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
