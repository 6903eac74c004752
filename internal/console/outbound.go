package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/outbound"
)

// The outbound pages show the queue of messages we send (package outbound):
// a list by state and partner, newest first, a detail page per message with
// what we sent and what came back, and the operator's Resend and Cancel.

// outboundTabs are the list's tabs: a state of the queue, "sending" (queued
// and held by a worker now) or "" (every message).
var outboundTabs = []struct{ Key, Label string }{
	{"", "all"}, {"queued", "queued"}, {"sending", "sending"}, {"awaiting-mdn", "awaiting MDN"},
	{"delivered", "delivered"}, {"failed", "failed"}, {"cancelled", "cancelled"},
}

// outboundPageSize is the number of messages per list page.
const outboundPageSize = 50

// Bounds of the "sending" tab's scan: leased messages are found among the
// queued ones, read in batches of sendingBatch, at most sendingScan in all.
const (
	sendingBatch = 500
	sendingScan  = 20000
)

type outboundTab struct {
	Key, Label, Link string
	On               bool
	Count            int
	Counted          bool
}

type outboundRow struct {
	outbound.Message
	// Shown is the state shown: the message's, or "sending".
	Shown string
}

type outboundListData struct {
	Tabs     []outboundTab
	State    string
	Partner  string
	Partners []string
	Rows     []outboundRow
	// Older links to the next page (older messages); First to the newest
	// page when this is not it.
	Older, First string
	// Truncated: the sending tab stopped scanning at sendingScan.
	Truncated bool
	Now       time.Time
}

// outboundOK answers 404 when no outbound store is configured (the pages
// are hidden) and reports whether the page may go on.
func (c *Console) outboundOK(w http.ResponseWriter) bool {
	if c.src.Outbound == nil {
		http.Error(w, "no outbound queue in this gateway", http.StatusNotFound)
		return false
	}
	return true
}

func (c *Console) outboundList(w http.ResponseWriter, r *http.Request, who caller) {
	if !c.outboundOK(w) {
		return
	}
	ctx, q, now := r.Context(), r.URL.Query(), c.now()
	d := outboundListData{State: q.Get("state"), Partner: strings.TrimSpace(q.Get("partner")), Now: now}
	valid := false
	for _, t := range outboundTabs {
		valid = valid || t.Key == d.State
	}
	if !valid {
		c.notice(w, r, who, http.StatusBadRequest, "", "Unknown state; pick one of the tabs.", "/console/outbound", "Back to the outbound queue")
		return
	}
	// The page's bound: the Created and ID of the previous page's last
	// message (before_id alone, without before, bounds nothing).
	var cur cursor
	if b := q.Get("before"); b != "" {
		t, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			c.notice(w, r, who, http.StatusBadRequest, "", "before: want an RFC 3339 time.", "/console/outbound", "Back to the outbound queue")
			return
		}
		cur = cursor{created: t, id: q.Get("before_id")}
	}
	stats, err := c.src.Outbound.Stats(ctx)
	if err != nil {
		c.fail(w, "reading the outbound queue", err)
		return
	}
	d.Partners = outboundPartners(c, stats)
	d.Tabs = tabsOf(stats, d.State, d.Partner)
	msgs, more, truncated, err := c.listOutbound(ctx, d.State, d.Partner, cur, now)
	if err != nil {
		c.fail(w, "reading the outbound queue", err)
		return
	}
	d.Truncated = truncated
	for _, m := range msgs {
		row := outboundRow{Message: m, Shown: string(m.State)}
		if m.Sending(now) {
			row.Shown = "sending"
		}
		d.Rows = append(d.Rows, row)
	}
	if more && len(msgs) > 0 {
		d.Older = outboundLink(d.State, d.Partner, cursorAfter(msgs[len(msgs)-1]))
	}
	if !cur.created.IsZero() {
		d.First = outboundLink(d.State, d.Partner, cursor{})
	}
	c.render(w, r, who, "outbound", "Outbound", d)
}

// cursor is where a page of the list starts: after the message created at
// created with id, in the list's order (newest first: Created, then ID).
// Many messages may share one Created (a bulk of submissions in one
// millisecond), so the ID is part of it. Zero: the newest page.
type cursor struct {
	created time.Time
	id      string
}

// cursorAfter is the cursor of the page after the one m is the last of.
func cursorAfter(m outbound.Message) cursor { return cursor{created: m.Created, id: m.ID} }

// listOutbound reads one page of the list: up to outboundPageSize messages
// after cur, and whether there are more.
func (c *Console) listOutbound(ctx context.Context, state, partner string, cur cursor, now time.Time) (msgs []outbound.Message, more, truncated bool, err error) {
	f := outbound.Filter{Partner: partner, Before: cur.created, BeforeID: cur.id, Limit: outboundPageSize + 1}
	if state != "" && state != "sending" {
		f.States = []outbound.State{outbound.State(state)}
	}
	if state != "sending" {
		msgs, err = c.src.Outbound.List(ctx, f)
		if err != nil {
			return nil, false, false, err
		}
		if len(msgs) > outboundPageSize {
			return msgs[:outboundPageSize], true, false, nil
		}
		return msgs, false, false, nil
	}
	// Held messages are queued ones with a live lease: read the queued
	// ones in batches and keep those, at most sendingScan read.
	f.States, f.Limit = []outbound.State{outbound.Queued}, sendingBatch
	for scanned := 0; scanned < sendingScan; {
		batch, err := c.src.Outbound.List(ctx, f)
		if err != nil {
			return nil, false, false, err
		}
		scanned += len(batch)
		for _, m := range batch {
			if !m.Sending(now) {
				continue
			}
			if len(msgs) == outboundPageSize {
				return msgs, true, false, nil
			}
			msgs = append(msgs, m)
		}
		if len(batch) < f.Limit {
			return msgs, false, false, nil
		}
		next := cursorAfter(batch[len(batch)-1])
		f.Before, f.BeforeID = next.created, next.id
	}
	return msgs, false, true, nil
}

// outboundLink is the list's URL for a tab, partner and page.
func outboundLink(state, partner string, cur cursor) string {
	v := url.Values{}
	if state != "" {
		v.Set("state", state)
	}
	if partner != "" {
		v.Set("partner", partner)
	}
	if !cur.created.IsZero() {
		v.Set("before", cur.created.UTC().Format(time.RFC3339Nano))
		if cur.id != "" {
			v.Set("before_id", cur.id)
		}
	}
	if len(v) == 0 {
		return "/console/outbound"
	}
	return "/console/outbound?" + v.Encode()
}

// tabsOf builds the tabs with the queue's counts for the partner (all
// partners when ""); "sending" and "all" have none.
func tabsOf(stats []outbound.Stats, state, partner string) []outboundTab {
	var sum outbound.Stats
	for _, s := range stats {
		if partner != "" && s.Partner != partner {
			continue
		}
		sum.Queued += s.Queued
		sum.Awaiting += s.Awaiting
		sum.Delivered += s.Delivered
		sum.Failed += s.Failed
		sum.Cancelled += s.Cancelled
	}
	counts := map[string]int{"queued": sum.Queued, "awaiting-mdn": sum.Awaiting, "delivered": sum.Delivered,
		"failed": sum.Failed, "cancelled": sum.Cancelled}
	var out []outboundTab
	for _, t := range outboundTabs {
		n, ok := counts[t.Key]
		out = append(out, outboundTab{Key: t.Key, Label: t.Label, Link: outboundLink(t.Key, partner, cursor{}),
			On: t.Key == state, Count: n, Counted: ok})
	}
	return out
}

// outboundPartners are the partner filter's choices: the directory's
// partners and any partner the queue has messages of.
func outboundPartners(c *Console, stats []outbound.Stats) []string {
	seen := map[string]bool{}
	var out []string
	add := func(id string) {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	if d, _, _ := c.src.Partners(); d != nil {
		for _, p := range d.Partners {
			add(p.ID)
		}
	}
	for _, s := range stats {
		add(s.Partner)
	}
	sort.Strings(out)
	return out
}

// outboundDetailData is the detail page of one message.
type outboundDetailData struct {
	M     outbound.Message
	Shown string
	// EvidenceText is the evidence body as text (EvidenceBinary: not
	// text; download it).
	EvidenceText   string
	EvidenceBinary bool
	// Records are the audit records of the message (submission, attempts,
	// operator actions), oldest first.
	Records []audit.Record
	// CanResend, CanCancel: the actions its state allows.
	CanResend, CanCancel bool
}

func (c *Console) outboundMessage(w http.ResponseWriter, r *http.Request, who caller) {
	if !c.outboundOK(w) {
		return
	}
	ctx := r.Context()
	m, ok := c.outboundGet(w, r, r.URL.Query().Get("id"))
	if !ok {
		return
	}
	d := outboundDetailData{M: m, Shown: string(m.State), CanResend: m.State == outbound.Failed || m.State == outbound.Cancelled,
		CanCancel: !m.State.Final()}
	if m.Sending(c.now()) {
		d.Shown = "sending"
	}
	if ev := m.Evidence; ev != nil {
		d.EvidenceText, d.EvidenceBinary = printable(ev.Body, 16<<10)
	}
	if c.src.Audit != nil {
		recs, err := c.outboundAudit(ctx, m)
		if err != nil {
			c.fail(w, "reading the audit", err)
			return
		}
		d.Records = recs
	}
	c.render(w, r, who, "outbound-message", "Outbound "+m.MessageID, d)
}

// outboundGet reads a message, answering 400/404/500 itself when it cannot.
func (c *Console) outboundGet(w http.ResponseWriter, r *http.Request, id string) (outbound.Message, bool) {
	if id == "" || len(id) > 200 {
		http.Error(w, "id: want a message's queue id", http.StatusBadRequest)
		return outbound.Message{}, false
	}
	m, err := c.src.Outbound.Get(r.Context(), id)
	if errors.Is(err, outbound.ErrNotFound) {
		http.Error(w, "no such outbound message", http.StatusNotFound)
		return m, false
	}
	if err != nil {
		c.fail(w, "reading the outbound queue", err)
		return m, false
	}
	return m, true
}

// outboundAudit reads the audit records of a message by partner and
// transport id (recorded with or without angle brackets).
func (c *Console) outboundAudit(ctx context.Context, m outbound.Message) ([]audit.Record, error) {
	var out []audit.Record
	ids := []string{dedup.NormalizeMessageID(m.MessageID)}
	if m.MessageID != ids[0] {
		ids = append(ids, m.MessageID)
	}
	for _, id := range ids {
		recs, err := c.src.Audit.Query(ctx, audit.Query{Partner: m.Partner, MessageID: id, Limit: maxScan})
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}

// outboundEvidence serves the MDN, receipt or error signal received for a
// message: as text, or with download=1 as a file.
func (c *Console) outboundEvidence(w http.ResponseWriter, r *http.Request, who caller) {
	if !c.outboundOK(w) {
		return
	}
	m, ok := c.outboundGet(w, r, r.URL.Query().Get("id"))
	if !ok {
		return
	}
	if m.Evidence == nil {
		http.Error(w, "no MDN or receipt received for this message", http.StatusNotFound)
		return
	}
	if r.URL.Query().Get("download") != "" {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="`+safeName(m.Evidence.Kind+"-"+m.ID)+`.txt"`)
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	_, _ = w.Write(m.Evidence.Body)
}

// outboundPayload downloads the payload of a message (streamed).
func (c *Console) outboundPayload(w http.ResponseWriter, r *http.Request, who caller) {
	if !c.outboundOK(w) {
		return
	}
	m, ok := c.outboundGet(w, r, r.URL.Query().Get("id"))
	if !ok {
		return
	}
	rc, err := c.src.Outbound.OpenPayload(r.Context(), m.ID)
	if err != nil {
		c.fail(w, "reading the payload", err)
		return
	}
	defer rc.Close()
	name := m.Filename
	if name == "" {
		name = m.ID + ".payload"
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+safeName(name)+`"`)
	if _, err := io.Copy(w, rc); err != nil {
		c.log.Warn("console: payload download cut short", "id", m.ID, "err", err)
	}
}

// outboundResend queues a failed or cancelled message again (same
// Message-ID) and wakes the sender.
func (c *Console) outboundResend(w http.ResponseWriter, r *http.Request, who caller) {
	c.outboundAction(w, r, who, "resend", func(ctx context.Context, m outbound.Message, _ string) error {
		return c.src.Outbound.Resend(ctx, m.ID)
	})
}

// outboundCancel ends a message that is not final, with the operator's
// reason.
func (c *Console) outboundCancel(w http.ResponseWriter, r *http.Request, who caller) {
	c.outboundAction(w, r, who, "cancel", func(ctx context.Context, m outbound.Message, reason string) error {
		return c.src.Outbound.Cancel(ctx, m.ID, reason)
	})
}

// outboundAction runs an operator action on a message: checked against
// its state, audited first (an action that cannot be audited does not
// happen; one that then fails is audited as failed), then done, and the
// sender woken.
func (c *Console) outboundAction(w http.ResponseWriter, r *http.Request, who caller, action string,
	do func(ctx context.Context, m outbound.Message, reason string) error) {
	if !c.outboundOK(w) {
		return
	}
	ctx := r.Context()
	m, ok := c.outboundGet(w, r, r.PostForm.Get("id"))
	if !ok {
		return
	}
	back := "/console/outbound/message?id=" + url.QueryEscape(m.ID)
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	var refusal string
	switch {
	case action == "cancel" && m.State.Final():
		refusal = "Not cancelled: the message is " + string(m.State) + " already."
	case action == "cancel" && (reason == "" || len(reason) > 1000):
		refusal = "A cancel needs a reason (at most 1000 characters)."
	case action == "resend" && m.State != outbound.Failed && m.State != outbound.Cancelled:
		refusal = "Not resent: only a failed or cancelled message can be resent; this one is " + string(m.State) + "."
	}
	if refusal != "" {
		status := http.StatusConflict
		if action == "cancel" && !m.State.Final() {
			status = http.StatusBadRequest
		}
		c.notice(w, r, who, status, "", refusal, back, "Back to the message")
		return
	}
	decision := map[string]string{"resend": "resent", "cancel": "cancelled"}[action]
	rec := audit.Record{Partner: m.Partner, Protocol: string(m.Protocol), MessageID: dedup.NormalizeMessageID(m.MessageID),
		PayloadSHA256: m.SHA256, Decision: decision, Disposition: "outbound " + m.ID}
	if reason != "" && action == "cancel" {
		rec.Error = "reason: " + reason
	}
	if err := c.audit(ctx, who, rec); err != nil {
		c.fail(w, "auditing the "+action, err)
		return
	}
	if err := do(ctx, m, reason); err != nil {
		c.log.Warn("console: outbound "+action+" failed", "id", m.ID, "who", who.who, "err", err)
		rec.Decision, rec.Error = action+"-failed", err.Error()
		if aerr := c.audit(ctx, who, rec); aerr != nil {
			c.log.Error("console: auditing a failed action", "id", m.ID, "err", aerr)
		}
		if errors.Is(err, outbound.ErrFinal) || errors.Is(err, outbound.ErrNotFinal) {
			c.notice(w, r, who, http.StatusConflict, "", "The message changed state meanwhile (delivered or settled?); nothing was done.", back, "Back to the message")
			return
		}
		c.fail(w, "the "+action, err)
		return
	}
	if c.src.Notify != nil {
		c.src.Notify()
	}
	redirect(w, r, back, decision)
}

// outboundSummary is the dashboard's card of the outbound queue.
type outboundSummary struct {
	Queued, Awaiting, Failed int
	Oldest                   time.Time
}

func (c *Console) outboundSummary(ctx context.Context) (*outboundSummary, error) {
	if c.src.Outbound == nil {
		return nil, nil
	}
	stats, err := c.src.Outbound.Stats(ctx)
	if err != nil {
		return nil, err
	}
	s := &outboundSummary{}
	for _, st := range stats {
		s.Queued += st.Queued
		s.Awaiting += st.Awaiting
		s.Failed += st.Failed
		if !st.OldestQueued.IsZero() && (s.Oldest.IsZero() || st.OldestQueued.Before(s.Oldest)) {
			s.Oldest = st.OldestQueued
		}
	}
	return s, nil
}
