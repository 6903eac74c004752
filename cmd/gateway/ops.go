package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/config"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/internal/retention"
	"github.com/edigateway/gateway/partners"
	"github.com/edigateway/gateway/store"
)

// openBackend opens the configured store for an operator command that
// reads or changes the gateway's state. It refuses rather than answer from a
// database it would have to create: a configuration (-config,
// $GATEWAY_CONFIG, or at least $GATEWAY_STORE) is required, a memory: store
// holds no state between processes, and the SQLite file must exist.
func openBackend(ctx context.Context, command, cfgPath string) (*config.Config, store.Backend, error) {
	if _, storeSet := os.LookupEnv("GATEWAY_STORE"); cfgPath == "" && !storeSet {
		return nil, nil, fmt.Errorf("%s needs a configuration: pass -config FILE or set $GATEWAY_CONFIG (or $GATEWAY_STORE); "+
			"it does not fall back to the default store", command)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Store == "memory:" {
		return nil, nil, fmt.Errorf("%s: the store is memory:, which keeps no state between processes", command)
	}
	if rest, ok := strings.CutPrefix(cfg.Store, "sqlite:"); ok {
		path := strings.TrimPrefix(rest, "//")
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("%s: the SQLite database %s does not exist (wrong -config or store setting?); not creating one", command, path)
			}
			return nil, nil, fmt.Errorf("%s: SQLite database: %w", command, err)
		}
	}
	be, err := store.Open(ctx, cfg.Store, dedup.Options{Lease: cfg.Lease})
	if err != nil {
		return nil, nil, fmt.Errorf("open store %s: %w", cfg.Redacted(), err)
	}
	return cfg, be, nil
}

// dedupPurge runs one retention purge, the one serve runs every
// purge_interval: ledger rows past their window are archived as gzipped
// JSON lines, then deleted; transport keys past retention are removed; final
// outbound messages past outbound.retention are deleted with their payloads.
func dedupPurge(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dedup purge", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	archive := fs.String("archive", "", "archive directory (default: the config's archive_dir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	cfg, be, err := openBackend(ctx, "dedup purge", *cfgPath)
	if err != nil {
		return err
	}
	defer be.Close()
	// The same check as serve: a retention shorter than a partner's window
	// would delete transport keys a retransmission still needs.
	dir, err := partners.Load(cfg.Partners)
	if err != nil {
		return err
	}
	if err := retention.CheckWindows(cfg.Retention, dir.Partners); err != nil {
		return fmt.Errorf("dedup purge refused: %w", err)
	}
	p := &retention.Purger{Store: be, Ledger: be, ArchiveDir: cfg.ArchiveDir, Retention: cfg.Retention,
		Outbound: be.Outbound(), OutboundRetention: cfg.Outbound.Retention}
	if *archive != "" {
		p.ArchiveDir = *archive
	}
	rep, err := p.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "purged %d transport keys past retention %s and %d interchanges past their windows\n",
		rep.TransportKeys, cfg.Retention, rep.Interchanges)
	if rep.Replaced > 0 {
		fmt.Fprintf(stdout, "archived and removed %d earlier uses of reused interchange references\n", rep.Replaced)
	}
	for _, a := range rep.Archives {
		fmt.Fprintln(stdout, "archived:", a)
	}
	if cfg.Outbound.Retention > 0 {
		fmt.Fprintf(stdout, "purged %d delivered, failed or cancelled outbound messages past outbound.retention %s\n",
			rep.OutboundMessages, cfg.Outbound.Retention)
	} else {
		fmt.Fprintln(stdout, "outbound.retention is 0: final outbound messages are kept")
	}
	return nil
}

// auditExport prints the evidence for a partner, time range, transport id
// or interchange reference as JSON.
func auditExport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("audit export", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	q := retention.ExportQuery{}
	fs.StringVar(&q.Partner, "partner", "", "partner id")
	fs.StringVar(&q.MessageID, "message-id", "", "transport id (AS2 Message-ID or eb:MessageId, without brackets)")
	fs.StringVar(&q.Reference, "reference", "", "interchange reference (UNB 0020, ISA13, cbc:ID, SBDH InstanceIdentifier)")
	from := fs.String("from", "", "start time (RFC 3339)")
	to := fs.String("to", "", "end time (RFC 3339)")
	fs.IntVar(&q.Limit, "limit", 0, "maximum records (default 10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, t := range []struct {
		s   string
		dst *time.Time
	}{{*from, &q.From}, {*to, &q.To}} {
		if t.s == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.s)
		if err != nil {
			return fmt.Errorf("%w: -from/-to: %v", errUsage, err)
		}
		*t.dst = v
	}
	ctx := context.Background()
	_, be, err := openBackend(ctx, "audit export", *cfgPath)
	if err != nil {
		return err
	}
	defer be.Close()
	reader, ok := be.AuditSink().(audit.Reader)
	if !ok {
		return errors.New("this store's audit sink cannot be read back")
	}
	ev, err := retention.Export(ctx, be, reader, q)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(ev)
}
