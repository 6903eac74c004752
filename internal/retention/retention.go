// Package retention purges dedup state past its windows and exports the
// evidence an operator shows a partner ("why did my retry not produce an
// invoice?").
package retention

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/outbound"
	"github.com/edigateway/gateway/partners"
)

// Purger removes expired rows. Interchanges are archived as gzipped JSON
// lines (one InterchangeRecord per line) and synced to disk before they are
// deleted, so nothing is lost to a crash between the two.
type Purger struct {
	Store  dedup.Store
	Ledger dedup.Ledger
	// ArchiveDir receives ledger-<time>.jsonl.gz files.
	ArchiveDir string
	// Retention applies to transport keys; it must not be shorter than any
	// partner's dedup window (checked at startup by the server).
	Retention time.Duration
	// Outbound is the queue of messages to partners (nil: none); its
	// messages in a final state last changed more than OutboundRetention
	// ago are deleted with their payloads (0: kept forever), Batch at a
	// time. They are not archived: the audit records of their
	// transmissions stay.
	Outbound          outbound.Store
	OutboundRetention time.Duration
	// Batch is how many interchanges are archived per file round, and how
	// many outbound messages one Purge call deletes (default 1000).
	Batch int
	Now   func() time.Time
}

// CheckWindows refuses a retention shorter than any partner's dedup window
// (AS2 or AS4): purging transport keys inside a window would let a late
// retransmission run the handler again. For AS4 it is the window plus twice
// the partner's clock skew: the endpoint refuses a message whose signed
// time is older than window + skew, and that time may lie up to one skew
// ahead of our clock when the message is accepted, so a captured message
// is refused by its age before its transport key can be purged. `serve`
// and `gateway dedup purge` both call it before they purge.
func CheckWindows(retention time.Duration, ps []*partners.Partner) error {
	for _, p := range ps {
		var w time.Duration
		why := "dedup window"
		if p.AS2 != nil && p.AS2.DedupWindow.Std() > w {
			w = p.AS2.DedupWindow.Std()
		}
		if p.AS4 != nil {
			if aw := p.AS4.DedupWindow.Std() + 2*p.AS4.ClockSkew.Std(); aw > w {
				w, why = aw, "AS4 dedup window plus twice its clock_skew"
			}
		}
		if w > retention {
			return fmt.Errorf("retention: retention %s is shorter than partner %s's %s, %s (%s); "+
				"purging would delete transport keys a retransmission or a replayed message can still carry, so the handler would run again: "+
				"raise retention to at least %s", retention, p.ID, why, w, p.File, w)
		}
	}
	return nil
}

// Report says what a purge removed.
type Report struct {
	TransportKeys int64
	Interchanges  int64
	// Replaced counts archived rows that a later claim had replaced.
	Replaced int64
	Archives []string
	// OutboundMessages counts the final outbound messages deleted.
	OutboundMessages int64
}

// Run purges once.
func (p *Purger) Run(ctx context.Context) (Report, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	var rep Report
	if p.Ledger != nil {
		batch := p.Batch
		if batch <= 0 {
			batch = 1000
		}
		for {
			recs, err := p.Ledger.ExpiredInterchanges(ctx, now(), batch)
			if err != nil {
				return rep, fmt.Errorf("retention: list expired interchanges: %w", err)
			}
			if len(recs) == 0 {
				break
			}
			path, err := p.archive("ledger-", recs, now())
			if err != nil {
				return rep, err
			}
			rep.Archives = append(rep.Archives, path)
			n, err := p.Ledger.DeleteInterchanges(ctx, recs)
			if err != nil {
				return rep, fmt.Errorf("retention: delete interchanges (archived in %s): %w", path, err)
			}
			rep.Interchanges += n
			if len(recs) < batch || n == 0 {
				break
			}
		}
		// Rows a reuse or an accepted drift replaced were kept by the
		// ledger in the replacing claim's transaction; they are archived
		// the same way, then deleted.
		for {
			recs, err := p.Ledger.ReplacedInterchanges(ctx, dedup.InterchangeQuery{To: now(), Limit: batch})
			if err != nil {
				return rep, fmt.Errorf("retention: list replaced interchanges: %w", err)
			}
			if len(recs) == 0 {
				break
			}
			path, err := p.archive("ledger-replaced-", recs, now())
			if err != nil {
				return rep, err
			}
			rep.Archives = append(rep.Archives, path)
			n, err := p.Ledger.DeleteReplaced(ctx, recs)
			if err != nil {
				return rep, fmt.Errorf("retention: delete replaced interchanges (archived in %s): %w", path, err)
			}
			rep.Replaced += n
			if len(recs) < batch || n == 0 {
				break
			}
		}
	}
	if p.Store != nil && p.Retention > 0 {
		n, err := p.Store.Expire(ctx, now().Add(-p.Retention))
		if err != nil {
			return rep, fmt.Errorf("retention: expire transport keys: %w", err)
		}
		rep.TransportKeys = n
	}
	if p.Outbound != nil && p.OutboundRetention > 0 {
		n, err := p.purgeOutbound(ctx, now().Add(-p.OutboundRetention))
		rep.OutboundMessages = n
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// purgeOutbound deletes the final outbound messages last changed before
// before, Batch per call (each call a few short transactions).
func (p *Purger) purgeOutbound(ctx context.Context, before time.Time) (int64, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	for {
		n, err := p.Outbound.Purge(ctx, before, batch)
		total += int64(n)
		if err != nil {
			return total, fmt.Errorf("retention: purge outbound messages: %w", err)
		}
		if n < batch {
			return total, nil
		}
	}
}

func (p *Purger) archive(prefix string, recs []dedup.InterchangeRecord, now time.Time) (string, error) {
	if p.ArchiveDir == "" {
		return "", fmt.Errorf("retention: no archive directory configured; refusing to delete unarchived interchanges")
	}
	if err := os.MkdirAll(p.ArchiveDir, 0o750); err != nil {
		return "", fmt.Errorf("retention: archive: %w", err)
	}
	path := filepath.Join(p.ArchiveDir, prefix+now.UTC().Format("20060102T150405.000000000Z")+".jsonl.gz")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return "", fmt.Errorf("retention: archive: %w", err)
	}
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	for _, r := range recs {
		if err = enc.Encode(archiveRecord(r)); err != nil {
			break
		}
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("retention: archive %s: %w", path, err)
	}
	return path, nil
}

// ArchivedInterchange is the JSON form of an archived ledger row.
type ArchivedInterchange struct {
	Key           string    `json:"key"`
	Partner       string    `json:"partner"`
	Standard      string    `json:"standard"`
	Sender        string    `json:"sender"`
	Recipient     string    `json:"recipient"`
	Reference     string    `json:"reference"`
	Date          string    `json:"date,omitempty"`
	Type          string    `json:"type,omitempty"`
	State         string    `json:"state"`
	PayloadSHA256 string    `json:"payload_sha256"`
	FirstSeen     time.Time `json:"first_seen"`
	LastSeen      time.Time `json:"last_seen"`
	Retries       int       `json:"retries"`
	MessageIDs    []string  `json:"message_ids"`
	WindowSeconds int64     `json:"window_seconds"`
	// Replaced is set for a row a later claim of the same interchange
	// replaced (reference reused after its window, drift accepted as new).
	Replaced *time.Time `json:"replaced,omitempty"`
}

func archiveRecord(r dedup.InterchangeRecord) ArchivedInterchange {
	a := ArchivedInterchange{Key: string(r.Key), Partner: r.Partner, Standard: r.Standard, Sender: r.Sender,
		Recipient: r.Recipient, Reference: r.Reference, Date: r.Date, Type: r.Type, State: r.State,
		PayloadSHA256: r.PayloadSHA256, FirstSeen: r.FirstSeen.UTC(), LastSeen: r.LastSeen.UTC(), Retries: r.Retries,
		MessageIDs: r.MessageIDs, WindowSeconds: int64(r.Window / time.Second)}
	if !r.Replaced.IsZero() {
		t := r.Replaced.UTC()
		a.Replaced = &t
	}
	return a
}

// Evidence is what `gateway audit export` prints: the ledger rows and the
// audit trail of every delivery they name.
type Evidence struct {
	Interchanges []ArchivedInterchange `json:"interchanges,omitempty"`
	Records      []audit.Record        `json:"records"`
}

// ExportQuery selects evidence; empty fields match anything.
type ExportQuery struct {
	Partner   string
	MessageID string
	Reference string
	From, To  time.Time
	Limit     int
}

// Export gathers evidence. With a reference, the interchange's ledger rows
// are included and the audit trail of every transport id that carried it,
// so that the partner sees each retry and the decision taken on it.
func Export(ctx context.Context, ledger dedup.Ledger, reader audit.Reader, q ExportQuery) (*Evidence, error) {
	ev := &Evidence{}
	seen := map[string]bool{}
	addRecords := func(aq audit.Query) error {
		recs, err := reader.Query(ctx, aq)
		if err != nil {
			return fmt.Errorf("retention: export: %w", err)
		}
		for _, r := range recs {
			k := fmt.Sprintf("%s|%s|%s|%s|%s|%s", r.Time.UTC().Format(time.RFC3339Nano), r.Step, r.Partner, r.MessageID, r.Decision, r.InterchangeKey)
			if !seen[k] {
				seen[k] = true
				ev.Records = append(ev.Records, r)
			}
		}
		return nil
	}
	if q.Reference != "" && ledger != nil {
		lq := dedup.InterchangeQuery{Partner: q.Partner, Reference: q.Reference, From: q.From, To: q.To, Limit: q.Limit}
		ics, err := ledger.FindInterchanges(ctx, lq)
		if err != nil {
			return nil, fmt.Errorf("retention: export: %w", err)
		}
		// Earlier uses of the reference, replaced by a later claim and
		// not yet archived by the purge, come first.
		old, err := ledger.ReplacedInterchanges(ctx, lq)
		if err != nil {
			return nil, fmt.Errorf("retention: export: %w", err)
		}
		for _, ic := range append(old, ics...) {
			ev.Interchanges = append(ev.Interchanges, archiveRecord(ic))
			for _, id := range ic.MessageIDs {
				if err := addRecords(audit.Query{Partner: ic.Partner, MessageID: id, Limit: q.Limit}); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := addRecords(audit.Query{Partner: q.Partner, MessageID: q.MessageID, Reference: q.Reference, From: q.From, To: q.To, Limit: q.Limit}); err != nil {
		return nil, err
	}
	sortRecords(ev.Records)
	return ev, nil
}

func sortRecords(rs []audit.Record) {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Time.Before(rs[j].Time) })
}
