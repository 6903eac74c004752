package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/inbox"
	"github.com/edigateway/gateway/internal/certs"
	"github.com/edigateway/gateway/outbox"
)

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"color": func(outcome string) string { return outcomeColor[outcome] },
	"short": func(s string) string {
		if len(s) > 16 {
			return s[:16] + "…"
		}
		return s
	},
	"days": func(t time.Time) int { return int(time.Until(t).Hours() / 24) },
	"q":    url.QueryEscape,
	"dur": func(d time.Duration) string {
		if d > 0 && d%(24*time.Hour) == 0 {
			return strconv.Itoa(int(d/(24*time.Hour))) + " days"
		}
		return d.String()
	},
}

// dashboard: the last 24 hours.
type dashboardData struct {
	Chart     template.HTML
	Legend    []string
	Attention []*Delivery
	// AttentionTotal counts them all (Attention shows the newest 20).
	AttentionTotal int
	Backlog        int
	Oldest         time.Time
	Pending        []outbox.Delivery
	Certs          []certRow
	Warn           time.Duration
	Total          int
	// Outbound is the outbound queue's summary (nil: no outbound queue).
	Outbound *outboundSummary
}

type certRow struct {
	certs.Cert
	Days    int
	Expired bool
}

func (c *Console) dashboard(w http.ResponseWriter, r *http.Request, who caller) {
	now := c.now()
	ds, err := c.recent(r.Context(), audit.Query{From: now.Add(-25 * time.Hour)})
	if err != nil {
		c.fail(w, "reading the audit", err)
		return
	}
	data := dashboardData{Chart: chartSVG(countHourly(ds, now)), Legend: outcomes, Total: len(ds)}
	for _, d := range newestFirst(ds) {
		// A quarantined delivery an operator released or discarded needs
		// no more attention.
		if attention[d.Outcome] && d.Resolved == nil {
			data.AttentionTotal++
			if len(data.Attention) < 20 {
				data.Attention = append(data.Attention, d)
			}
		}
	}
	if pc, ok := c.src.Outbox.(outbox.PendingCounter); ok {
		data.Backlog, data.Oldest, err = pc.Pending(r.Context())
		if err != nil {
			c.fail(w, "reading the outbox", err)
			return
		}
	}
	if op, ok := c.src.Outbox.(outbox.Operator); ok {
		data.Pending, _ = op.ListPending(r.Context(), 5)
	}
	if data.Outbound, err = c.outboundSummary(r.Context()); err != nil {
		c.fail(w, "reading the outbound queue", err)
		return
	}
	_, certs, warn := c.src.Partners()
	data.Warn = warn
	for _, ct := range certs {
		if ct.Cert != nil && ct.Cert.NotAfter.Before(now.Add(warn)) {
			data.Certs = append(data.Certs, certRow{Cert: ct, Days: int(ct.Cert.NotAfter.Sub(now).Hours() / 24), Expired: ct.Cert.NotAfter.Before(now)})
		}
	}
	sort.Slice(data.Certs, func(i, j int) bool { return data.Certs[i].Cert.Cert.NotAfter.Before(data.Certs[j].Cert.Cert.NotAfter) })
	c.render(w, r, who, "dashboard", "Dashboard", data)
}

// messages: search.
type searchData struct {
	Partner, MessageID, Reference, Decision, From, To string
	Outcomes                                          []string
	Partners                                          []string
	// Claimed are the senders unknown to the directory that refused
	// messages claimed to be (suggested in the partner field).
	Claimed            []string
	Results            []*Delivery
	Page, Pages, Total int
	Prev, Next         string
	Truncated          bool
}

const pageSize = 50

// formTimes are the forms the search's From and To take, all read as UTC
// whatever the browser's time zone or locale (the fields are plain text:
// a datetime-local input shows and takes the browser's local format).
var formTimes = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02"}

// parseFormTime reads a search time as UTC; a trailing "Z" is allowed.
func parseFormTime(v string) (time.Time, error) {
	v = strings.TrimSuffix(strings.TrimSpace(v), "Z")
	for _, f := range formTimes {
		if t, err := time.ParseInLocation(f, v, time.UTC); err == nil {
			return t, nil
		}
	}
	// The value is not repeated: a page shows only the server's words.
	return time.Time{}, errors.New("want YYYY-MM-DDTHH:MM or YYYY-MM-DD (UTC)")
}

func (c *Console) messages(w http.ResponseWriter, r *http.Request, who caller) {
	q := r.URL.Query()
	s := searchData{Partner: strings.TrimSpace(q.Get("partner")), MessageID: strings.TrimSpace(q.Get("message_id")), Reference: strings.TrimSpace(q.Get("reference")),
		Decision: q.Get("decision"), From: strings.TrimSpace(q.Get("from")), To: strings.TrimSpace(q.Get("to")), Outcomes: outcomes}
	known := false
	if d, _, _ := c.src.Partners(); d != nil {
		for _, p := range d.Partners {
			s.Partners = append(s.Partners, p.ID)
			known = known || p.ID == s.Partner
		}
	}
	// A partner the directory knows is selected by the audit query; any
	// other text is what an unknown sender claimed to be (its AS2-From or
	// eb:From PartyId, case-insensitive) or the id of a partner no longer
	// in the directory, matched on the newest records read.
	aq := audit.Query{MessageID: dedup.NormalizeMessageID(s.MessageID), Reference: s.Reference}
	claimed := ""
	if known {
		aq.Partner = s.Partner
	} else {
		claimed = s.Partner
	}
	var err error
	if s.From != "" {
		if aq.From, err = parseFormTime(s.From); err != nil {
			c.notice(w, r, who, http.StatusBadRequest, "", "From: "+err.Error(), "/console/messages", "Back to the search")
			return
		}
	}
	if s.To != "" {
		if aq.To, err = parseFormTime(s.To); err != nil {
			c.notice(w, r, who, http.StatusBadRequest, "", "To: "+err.Error(), "/console/messages", "Back to the search")
			return
		}
	}
	ds, err := c.recent(r.Context(), aq)
	if err != nil {
		c.fail(w, "reading the audit", err)
		return
	}
	// Every record of a delivery carries its first interchange's
	// reference (the pipeline sets it before the received step), so the
	// audit query by reference returns whole deliveries.
	var hits []*Delivery
	seen := map[string]bool{}
	for _, d := range newestFirst(ds) {
		if d.Partner == "" && d.Claimed != "" && !seen[d.Claimed] && len(s.Claimed) < 100 {
			seen[d.Claimed] = true
			s.Claimed = append(s.Claimed, d.Claimed)
		}
		if s.Decision != "" && d.Outcome != s.Decision {
			continue
		}
		// (A partner no longer in the directory is still found by its id.)
		if claimed != "" && d.Partner != claimed && (d.Partner != "" || !strings.EqualFold(d.Claimed, claimed)) {
			continue
		}
		hits = append(hits, d)
	}
	s.Total = len(hits)
	s.Pages = max(1, (len(hits)+pageSize-1)/pageSize)
	s.Page, _ = strconv.Atoi(q.Get("page"))
	s.Page = min(max(s.Page, 1), s.Pages)
	s.Results = hits[min((s.Page-1)*pageSize, len(hits)):min(s.Page*pageSize, len(hits))]
	link := func(p int) string {
		v := url.Values{}
		for k, x := range map[string]string{"partner": s.Partner, "message_id": s.MessageID, "reference": s.Reference,
			"decision": s.Decision, "from": s.From, "to": s.To} {
			if x != "" {
				v.Set(k, x)
			}
		}
		v.Set("page", strconv.Itoa(p))
		return "/console/messages?" + v.Encode()
	}
	if s.Page > 1 {
		s.Prev = link(s.Page - 1)
	}
	if s.Page < s.Pages {
		s.Next = link(s.Page + 1)
	}
	c.render(w, r, who, "messages", "Messages", s)
}

// message: detail of one transport key.
type detailData struct {
	Key          string
	First        *Delivery
	Deliveries   []*Delivery
	Operator     []audit.Record
	Related      []*Delivery
	Interchanges []dedup.InterchangeRecord
	Claim        *dedup.ClaimRecord
	Reply        *exchange.Reply
	ReplyText    string
	ReplyBinary  bool
	Drift        []DriftHashes
	Files        []string
	Rows         []inbox.TableRow
	// Incident is set when the page was opened by the incident reference
	// of a refusal that has no transport key (an AS4 message from an
	// unknown party).
	Incident string
	// Release is set when Key is the key an operator's release ran under:
	// nobody was sent its reply.
	Release *releaseInfo
}

// releaseInfo is the release a key was processed under, and what the
// partner's own delivery was answered.
type releaseInfo struct {
	Operator audit.Record
	// PartnerKey is the key of the partner's quarantined delivery, and
	// Partner that delivery (nil: not in the audit read).
	PartnerKey string
	Partner    *Delivery
}

var incidentRef = regexp.MustCompile(`^GW-[0-9A-Za-z]{4,32}$`)

func (c *Console) message(w http.ResponseWriter, r *http.Request, who caller) {
	ctx := r.Context()
	key, incident := r.URL.Query().Get("key"), strings.TrimSpace(r.URL.Query().Get("incident"))
	var recs []audit.Record
	var err error
	switch {
	case dedup.Key(key).Valid():
		recs, err = c.src.Audit.Query(ctx, audit.Query{Key: key, Limit: maxScan})
	case key == "" && incidentRef.MatchString(incident):
		// A refusal by its incident reference: the page of its key when
		// it has one, else its own records.
		recs, err = c.src.Audit.Query(ctx, audit.Query{Incident: incident, Limit: maxScan})
		if err == nil && len(recs) > 0 && dedup.Key(recs[0].Key).Valid() {
			http.Redirect(w, r, "/console/message?key="+recs[0].Key, http.StatusSeeOther)
			return
		}
	default:
		http.Error(w, "want key (a transport key, 64 hex digits) or incident (GW-…)", http.StatusBadRequest)
		return
	}
	if err != nil {
		c.fail(w, "reading the audit", err)
		return
	}
	if len(recs) == 0 {
		http.Error(w, "no audit records for this key or incident", http.StatusNotFound)
		return
	}
	d := detailData{Key: key, Deliveries: deliveries(recs), Drift: driftOf(recs)}
	if key == "" {
		d.Incident = incident
	}
	for _, rec := range recs {
		if rec.Step == audit.StepOperator {
			d.Operator = append(d.Operator, rec)
		}
	}
	if len(d.Deliveries) > 0 {
		d.First = d.Deliveries[0]
	} else {
		d.First = &Delivery{Partner: recs[0].Partner, Protocol: recs[0].Protocol, MessageID: recs[0].MessageID, Key: key}
	}
	// Other keys that carried this message id (a release from the
	// quarantine is processed under a key of its own).
	if other, err := c.src.Audit.Query(ctx, audit.Query{Partner: d.First.Partner, MessageID: d.First.MessageID, Limit: maxScan}); err == nil {
		for _, o := range deliveries(other) {
			if o.Key != key || key == "" && o.Incident != incident {
				d.Related = append(d.Related, o)
			}
		}
		for _, rec := range other {
			if rec.Step == audit.StepOperator && rec.Key != key {
				d.Operator = append(d.Operator, rec)
			}
			// This key is a release's: the reply stored with it went to
			// nobody; the partner was answered on its own delivery.
			if key != "" && rec.Step == audit.StepOperator && rec.Disposition == "release key "+key && d.Release == nil {
				d.Release = c.releaseOf(ctx, rec)
			}
		}
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		if rec.InterchangeKey == "" || seen[rec.InterchangeKey] || c.src.Ledger == nil {
			continue
		}
		seen[rec.InterchangeKey] = true
		ir, err := c.src.Ledger.Interchange(ctx, dedup.Key(rec.InterchangeKey))
		if errors.Is(err, dedup.ErrNotFound) {
			continue
		}
		if err != nil {
			c.fail(w, "reading the ledger", err)
			return
		}
		d.Interchanges = append(d.Interchanges, ir)
	}
	if c.src.Claims != nil && key != "" {
		cr, err := c.src.Claims.ClaimRecord(ctx, dedup.Key(key))
		if err != nil && !errors.Is(err, dedup.ErrNotFound) {
			c.fail(w, "reading the dedup store", err)
			return
		}
		if err == nil {
			d.Claim = &cr
			if len(cr.Reply) > 0 {
				if rep, err := exchange.DecodeReply(cr.Reply); err == nil {
					d.Reply = &rep
					d.ReplyText, d.ReplyBinary = printable(rep.Body, 16<<10)
				}
			}
		}
	}
	if key != "" {
		d.Files = c.payloadFiles(d.First.Partner, key)
	}
	if c.src.Table != nil && key != "" {
		if d.Rows, err = c.src.Table.Rows(ctx, key); err != nil {
			c.fail(w, "reading inbox_payloads", err)
			return
		}
	}
	c.render(w, r, who, "message", "Message "+d.First.MessageID, d)
}

// releaseOf is the release an operator record describes, with the
// partner's quarantined delivery it released.
func (c *Console) releaseOf(ctx context.Context, op audit.Record) *releaseInfo {
	ri := &releaseInfo{Operator: op, PartnerKey: op.Key}
	if !dedup.Key(op.Key).Valid() {
		return ri
	}
	recs, err := c.src.Audit.Query(ctx, audit.Query{Key: op.Key, Limit: maxScan})
	if err != nil {
		return ri
	}
	for _, d := range deliveries(recs) {
		if d.Outcome == "quarantined" && !d.Time.After(op.Time) {
			ri.Partner = d // the latest quarantined delivery before the release
		}
	}
	return ri
}

// printable returns b as text when it is UTF-8 without control bytes other
// than white space (at most limit bytes), else binary = true.
func printable(b []byte, limit int) (string, bool) {
	if !utf8.Valid(b) {
		return "", true
	}
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
			return "", true
		}
	}
	if len(b) > limit {
		return string(b[:limit]) + "\n… (truncated; download for the whole reply)", false
	}
	return string(b), false
}

// reply serves the stored reply (MDN or receipt) of a key: as text, or
// with download=1 as a file (headers, blank line, body).
func (c *Console) reply(w http.ResponseWriter, r *http.Request, who caller) {
	key := r.URL.Query().Get("key")
	if !dedup.Key(key).Valid() || c.src.Claims == nil {
		http.Error(w, "key: want a transport key", http.StatusBadRequest)
		return
	}
	cr, err := c.src.Claims.ClaimRecord(r.Context(), dedup.Key(key))
	if errors.Is(err, dedup.ErrNotFound) || err == nil && len(cr.Reply) == 0 {
		http.Error(w, "no reply stored for this key", http.StatusNotFound)
		return
	}
	if err != nil {
		c.fail(w, "reading the dedup store", err)
		return
	}
	rep, err := exchange.DecodeReply(cr.Reply)
	if err != nil {
		c.fail(w, "decoding the stored reply", err)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d\r\n", max(rep.Status, 200))
	_ = rep.Header.Write(&b)
	b.WriteString("\r\n")
	b.Write(rep.Body)
	if r.URL.Query().Get("download") != "" {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="reply-`+key[:16]+`.txt"`)
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	_, _ = w.Write([]byte(b.String()))
}

// payloadFiles lists the files that hold the payloads of a key: the dir
// inboxes' payloads (named with the key's first 16 hex digits) and the
// quarantine's.
func (c *Console) payloadFiles(partner, key string) []string {
	if !validPartner(partner) {
		return nil
	}
	k16 := key[:16]
	var out []string
	for _, root := range c.src.InboxDirs {
		names, err := inbox.Payloads(filepath.Join(root, partner))
		if err != nil {
			continue
		}
		for _, n := range names {
			if strings.Contains(n, "-"+k16+"-") {
				out = append(out, n)
			}
		}
	}
	if c.src.QuarantineDir != "" {
		for _, sub := range []string{"", releasedDir, discardedDir} {
			m, _ := filepath.Glob(filepath.Join(c.src.QuarantineDir, sub, partner, k16+"-*.payload"))
			for _, p := range m {
				out = append(out, filepath.Join(sub, filepath.Base(p)))
			}
		}
	}
	return out
}

// payload downloads one of payloadFiles.
func (c *Console) payload(w http.ResponseWriter, r *http.Request, who caller) {
	q := r.URL.Query()
	key, partner, file := q.Get("key"), q.Get("partner"), q.Get("file")
	if row := q.Get("row"); row != "" && dedup.Key(key).Valid() && c.src.Table != nil {
		id, err := strconv.ParseInt(row, 10, 64)
		if err != nil {
			http.Error(w, "row: want a number", http.StatusBadRequest)
			return
		}
		b, err := c.src.Table.Body(r.Context(), key, id)
		if err != nil {
			http.Error(w, "no such inbox_payloads row for this key", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="`+key[:16]+`-`+row+`.payload"`)
		_, _ = w.Write(b)
		return
	}
	if !dedup.Key(key).Valid() || !validPartner(partner) {
		http.Error(w, "key and partner needed", http.StatusBadRequest)
		return
	}
	for _, f := range c.payloadFiles(partner, key) {
		if f != file {
			continue
		}
		for _, root := range c.src.InboxDirs {
			if p := filepath.Join(root, partner, f); fileExists(p) && filepath.Base(f) == f {
				serveFile(w, r, p)
				return
			}
		}
		dir, base := filepath.Split(f)
		serveFile(w, r, filepath.Join(c.src.QuarantineDir, dir, partner, base))
		return
	}
	http.Error(w, "no such payload file for this key", http.StatusNotFound)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func serveFile(w http.ResponseWriter, r *http.Request, path string) {
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, "payload file not readable", http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, "payload file not readable", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+safeName(filepath.Base(path))+`"`)
	http.ServeContent(w, r, "", st.ModTime(), f)
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return '_'
		}
		return r
	}, s)
}

// partners page.
type partnerRow struct {
	ID, Name, OnDrift, File string
	AS2                     any
	AS4                     any
	Certs                   []certRow
	Traffic                 map[string]int
	Total                   int
}

type partnersData struct {
	Partners []partnerRow
	Identity []certRow
	Outcomes []string
}

func (c *Console) partnersPage(w http.ResponseWriter, r *http.Request, who caller) {
	now := c.now()
	dir, known, _ := c.src.Partners()
	ds, err := c.recent(r.Context(), audit.Query{From: now.Add(-24 * time.Hour)})
	if err != nil {
		c.fail(w, "reading the audit", err)
		return
	}
	traffic := map[string]map[string]int{}
	for _, d := range ds {
		if traffic[d.Partner] == nil {
			traffic[d.Partner] = map[string]int{}
		}
		traffic[d.Partner][d.Outcome]++
	}
	data := partnersData{Outcomes: outcomes}
	row := func(ct certs.Cert) certRow {
		return certRow{Cert: ct, Days: int(ct.Cert.NotAfter.Sub(now).Hours() / 24), Expired: ct.Cert.NotAfter.Before(now)}
	}
	for _, ct := range known {
		if ct.Partner == "" && ct.Cert != nil {
			data.Identity = append(data.Identity, row(ct))
		}
	}
	if dir != nil {
		for _, p := range dir.Partners {
			pr := partnerRow{ID: p.ID, Name: p.Name, OnDrift: p.OnDrift, File: p.File, Traffic: traffic[p.ID]}
			if pr.OnDrift == "" {
				pr.OnDrift = "reject"
			}
			if p.AS2 != nil {
				pr.AS2 = p.AS2
			}
			if p.AS4 != nil {
				pr.AS4 = p.AS4
			}
			for _, n := range traffic[p.ID] {
				pr.Total += n
			}
			for _, ct := range known {
				if ct.Partner == p.ID && ct.Cert != nil {
					pr.Certs = append(pr.Certs, row(ct))
				}
			}
			data.Partners = append(data.Partners, pr)
		}
	}
	c.render(w, r, who, "partners", "Partners", data)
}

// outbox page.
type outboxData struct {
	Pending  []outbox.Delivery
	Operator bool
	Now      time.Time
}

func (c *Console) outboxPage(w http.ResponseWriter, r *http.Request, who caller) {
	data := outboxData{Now: c.now()}
	if op, ok := c.src.Outbox.(outbox.Operator); ok {
		data.Operator = true
		var err error
		if data.Pending, err = op.ListPending(r.Context(), 500); err != nil {
			c.fail(w, "reading the outbox", err)
			return
		}
	}
	c.render(w, r, who, "outbox", "Async MDN outbox", data)
}

func (c *Console) retryNow(w http.ResponseWriter, r *http.Request, who caller) {
	id := r.PostForm.Get("id")
	op, ok := c.src.Outbox.(outbox.Operator)
	if !ok || id == "" {
		http.Error(w, "no such delivery", http.StatusBadRequest)
		return
	}
	d, _, err := c.src.Outbox.Get(r.Context(), id)
	if errors.Is(err, outbox.ErrNotFound) {
		http.Error(w, "no such delivery", http.StatusNotFound)
		return
	}
	if err != nil {
		c.fail(w, "reading the outbox", err)
		return
	}
	if err := op.RetryNow(r.Context(), id); err != nil {
		c.log.Warn("console: retry now failed", "id", id, "who", who.who, "err", err)
		c.notice(w, r, who, http.StatusConflict, "", "Retry now failed: the delivery is no longer pending (delivered or given up meanwhile?).",
			"/console/outbox", "Back to the outbox")
		return
	}
	if err := c.audit(r.Context(), who, audit.Record{Partner: d.Partner, MessageID: dedup.NormalizeMessageID(d.MessageID), Decision: "retry-now",
		Disposition: "outbox " + id}); err != nil {
		c.fail(w, "auditing the action", err)
		return
	}
	// The dispatcher is woken rather than left to find the delivery at
	// its next poll.
	if c.src.WakeOutbox != nil {
		c.src.WakeOutbox()
	}
	redirect(w, r, "/console/outbox", "retry-now")
}

// redirect sends the browser on to path after an action, with the key of
// the flash message (flashes) it shows.
func redirect(w http.ResponseWriter, r *http.Request, path, flashKey string) {
	if flashKey != "" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "flash=" + url.QueryEscape(flashKey)
	}
	http.Redirect(w, r, path, http.StatusSeeOther)
}
