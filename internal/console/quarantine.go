package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
)

// The quarantine directory holds <partner>/<key16>-<sha16>.payload with a
// .json description beside it (exchange's on_drift: quarantine); an item of
// a message with more payloads has them in <base>.payload, <base>.2.payload,
// ... <base>.<n>.payload, listed in that order by the description. Released
// and discarded items move to .released/<partner>/ and .discarded/<partner>/
// (names no partner id can take: ids start with a letter or digit).
const (
	releasedDir  = ".released"
	discardedDir = ".discarded"
)

var (
	partnerID = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	itemBase  = regexp.MustCompile(`^[0-9a-f]{1,16}-[0-9a-f]{1,16}$`)
)

func validPartner(p string) bool { return partnerID.MatchString(p) }

// QuarantineItem is one quarantined delivery: one payload, or every payload
// of a message that drifted on its message id.
type QuarantineItem struct {
	ID            string // <partner>/<base>
	Partner       string
	Protocol      string    `json:"protocol"`
	MessageID     string    `json:"message_id"`
	What          string    `json:"what"`
	Reference     string    `json:"reference"`
	StoredSHA256  string    `json:"stored_sha256"`
	PayloadSHA256 string    `json:"payload_sha256"`
	FirstSeen     time.Time `json:"first_seen"`
	Quarantined   time.Time `json:"quarantined"`
	ContentType   string    `json:"content_type"`
	Filename      string    `json:"filename"`
	Size          int64     // of all payloads
	Path          string    // the (first) .payload file
	// Payloads lists the item's payload files in message order. An item
	// described without the list (one payload) has PayloadSHA256,
	// ContentType and Filename as its one entry.
	Payloads []ItemPayload `json:"payloads"`
}

// ItemPayload is one payload file of a quarantine item.
type ItemPayload struct {
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	Filename    string `json:"filename"`
	N           int    `json:"-"` // position, from 1
	Size        int64  `json:"-"`
	Path        string `json:"-"`
}

// maxItemPayloads bounds the payload files one description can name.
const maxItemPayloads = 10000

// ItemPayloadFile is the file name of payload i (from 0) of the item base.
func ItemPayloadFile(base string, i int) string {
	if i == 0 {
		return base + ".payload"
	}
	return fmt.Sprintf("%s.%d.payload", base, i+1)
}

// ParseItemID splits a quarantine item id and checks its form.
func ParseItemID(id string) (partner, base string, ok bool) {
	partner, base, found := strings.Cut(id, "/")
	return partner, base, found && validPartner(partner) && itemBase.MatchString(base)
}

// ReadItem reads the description of a quarantined payload.
func ReadItem(dir, id string) (QuarantineItem, error) {
	partner, base, ok := ParseItemID(id)
	if !ok || dir == "" {
		return QuarantineItem{}, os.ErrNotExist
	}
	b, err := os.ReadFile(filepath.Join(dir, partner, base+".json"))
	if err != nil {
		return QuarantineItem{}, err
	}
	it := QuarantineItem{ID: id, Partner: partner, Path: filepath.Join(dir, partner, base+".payload")}
	if err := json.Unmarshal(b, &it); err != nil {
		return QuarantineItem{}, fmt.Errorf("console: quarantine %s: %w", id, err)
	}
	it.ID, it.Partner = id, partner
	if len(it.Payloads) == 0 {
		it.Payloads = []ItemPayload{{SHA256: it.PayloadSHA256, ContentType: it.ContentType, Filename: it.Filename}}
	}
	if len(it.Payloads) > maxItemPayloads {
		return QuarantineItem{}, fmt.Errorf("console: quarantine %s: %d payloads described", id, len(it.Payloads))
	}
	it.Size = 0
	for i := range it.Payloads {
		// File names follow from the position, never from the description.
		p := &it.Payloads[i]
		p.N, p.Path = i+1, filepath.Join(dir, partner, ItemPayloadFile(base, i))
		st, err := os.Stat(p.Path)
		if err != nil {
			return QuarantineItem{}, err
		}
		p.Size = st.Size()
		it.Size += p.Size
	}
	return it, nil
}

// ListItems lists the quarantined payloads, newest first.
func ListItems(dir string) ([]QuarantineItem, error) {
	if dir == "" {
		return nil, nil
	}
	parts, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []QuarantineItem
	for _, p := range parts {
		if !p.IsDir() || !validPartner(p.Name()) {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, p.Name(), "*.json"))
		for _, f := range files {
			base := strings.TrimSuffix(filepath.Base(f), ".json")
			it, err := ReadItem(dir, p.Name()+"/"+base)
			if err == nil {
				out = append(out, it)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Quarantined.After(out[j].Quarantined) })
	return out, nil
}

// MoveItem moves an item's payload and description to sub/<partner>/ of
// dir (released or discarded). The description goes last: an item whose
// payload moved but whose description did not is moved again by a retry.
func MoveItem(dir, sub string, it QuarantineItem) error {
	partner, base, _ := ParseItemID(it.ID)
	to := filepath.Join(dir, sub, partner)
	if err := os.MkdirAll(to, 0o750); err != nil {
		return err
	}
	n := max(1, len(it.Payloads))
	// All of the item goes under one name: a second item of the same base
	// in sub gets a suffix for all of its files.
	dbase := base
	if _, err := os.Stat(filepath.Join(to, base+".json")); err == nil {
		dbase = fmt.Sprintf("%s-%d", base, time.Now().UnixNano())
	}
	for i := range n {
		from := filepath.Join(dir, partner, ItemPayloadFile(base, i))
		if err := os.Rename(from, filepath.Join(to, ItemPayloadFile(dbase, i))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Rename(filepath.Join(dir, partner, base+".json"), filepath.Join(to, dbase+".json"))
}

type quarantineData struct {
	Items []QuarantineItem
	Dir   string
}

func (c *Console) quarantine(w http.ResponseWriter, r *http.Request, who caller) {
	items, err := ListItems(c.src.QuarantineDir)
	if err != nil {
		c.fail(w, "reading the quarantine", err)
		return
	}
	c.render(w, r, who, "quarantine", "Quarantine", quarantineData{Items: items, Dir: c.src.QuarantineDir})
}

type itemData struct {
	Item    QuarantineItem
	Preview string
	Binary  bool
	Key     string
}

func (c *Console) quarantineItem(w http.ResponseWriter, r *http.Request, who caller) {
	it, err := ReadItem(c.src.QuarantineDir, r.URL.Query().Get("id"))
	if err != nil {
		http.Error(w, "no such quarantined payload (released or discarded already?)", http.StatusNotFound)
		return
	}
	d := itemData{Item: it}
	if f, err := os.Open(it.Path); err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, 8<<10))
		f.Close()
		d.Preview, d.Binary = printable(b, 8<<10)
	}
	// The transport key of the refused delivery, for the link to its detail.
	d.Key = c.itemKey(r, it)
	c.render(w, r, who, "item", "Quarantined payload", d)
}

func (c *Console) quarantinePayload(w http.ResponseWriter, r *http.Request, who caller) {
	it, err := ReadItem(c.src.QuarantineDir, r.URL.Query().Get("id"))
	if err != nil {
		http.Error(w, "no such quarantined payload", http.StatusNotFound)
		return
	}
	path := it.Path
	if v := r.URL.Query().Get("n"); v != "" {
		// One payload of an item of several: n from 1.
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > len(it.Payloads) {
			http.Error(w, "no such quarantined payload", http.StatusNotFound)
			return
		}
		path = it.Payloads[n-1].Path
	}
	serveFile(w, r, path)
}

// ErrItemGone is returned by Source.Release for an item that left the
// quarantine while the release waited (another release or a discard took
// it first).
var ErrItemGone = errors.New("console: the quarantined payload was released or discarded already")

// RefusedError is a release refused for a reason the operator can act on
// (the payload file changed, the partner's message is being processed
// right now): its Reason is shown. Other errors show only an incident
// reference; their text goes to the log.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "release refused: " + e.Reason }

// release processes a quarantined payload once (Source.Release does the
// work and the audit). A second release of the same item is answered
// with when and by whom it was released.
func (c *Console) release(w http.ResponseWriter, r *http.Request, who caller) {
	id := r.PostForm.Get("id")
	it, err := ReadItem(c.src.QuarantineDir, id)
	if err != nil {
		c.itemGone(w, r, who, id, "released")
		return
	}
	if c.src.Release == nil {
		http.Error(w, "release is not available", http.StatusNotImplemented)
		return
	}
	res, err := c.src.Release(r.Context(), it, who.who)
	var refused *RefusedError
	switch {
	case errors.Is(err, ErrItemGone):
		c.itemGone(w, r, who, id, "released")
		return
	case errors.As(err, &refused):
		c.log.Warn("console: release refused", "item", id, "who", who.who, "err", err)
		c.notice(w, r, who, http.StatusConflict, "", "Not released: "+refused.Reason+".", "/console/quarantine/item?id="+url.QueryEscape(id), "Back to the payload")
		return
	case err != nil:
		incident := exchange.NewIncident()
		c.log.Error("console: release failed", "item", id, "who", who.who, "incident", incident, "err", err)
		c.notice(w, r, who, http.StatusInternalServerError, "", "The release failed (incident "+incident+"; the gateway log has the cause).",
			"/console/quarantine/item?id="+url.QueryEscape(id), "Back to the payload")
		return
	}
	flash := "released"
	if !res.HandlerRan {
		flash = "released-before"
	}
	redirect(w, r, "/console/message?key="+url.QueryEscape(res.Key), flash)
}

// itemGone answers an action on an item that is no longer in the
// quarantine: released or discarded before (when and by whom, from the
// audit), else not found. Asking again for what was done (action:
// "released" or "discarded") is no error.
func (c *Console) itemGone(w http.ResponseWriter, r *http.Request, who caller, id, action string) {
	back := "/console/quarantine"
	for _, sub := range []string{releasedDir, discardedDir} {
		if c.src.QuarantineDir == "" {
			break
		}
		it, err := ReadItem(filepath.Join(c.src.QuarantineDir, sub), id)
		if err != nil {
			continue
		}
		done, by, link := "released", "", back
		if sub == discardedDir {
			done = "discarded"
		}
		at := time.Time{}
		if st, err := os.Stat(strings.TrimSuffix(it.Path, ".payload") + ".json"); err == nil {
			at = st.ModTime()
		}
		if op, ok := c.operatorRecord(r, it, done); ok {
			at, by = op.Time, " by "+op.Actor
			if k, ok := strings.CutPrefix(op.Disposition, "release key "); ok && dedup.Key(k).Valid() {
				link = "/console/message?key=" + k
			}
		}
		what := fmt.Sprintf("This payload (%s of %s) was already %s at %s%s", it.MessageID, it.Partner, done, at.UTC().Format("2006-01-02 15:04:05Z"), by)
		if action == done {
			c.notice(w, r, who, http.StatusOK, what+"; nothing was done again.", "", link, "Where it went")
			return
		}
		c.notice(w, r, who, http.StatusConflict, "", what+"; it cannot be "+action+" now.", link, "Where it went")
		return
	}
	c.notice(w, r, who, http.StatusNotFound, "", "No such quarantined payload.", back, "Back to the quarantine")
}

// operatorRecord finds the audit record of the first release (or discard)
// of an item.
func (c *Console) operatorRecord(r *http.Request, it QuarantineItem, done string) (audit.Record, bool) {
	if c.src.Audit == nil {
		return audit.Record{}, false
	}
	recs, err := c.src.Audit.Query(r.Context(), audit.Query{Partner: it.Partner, MessageID: it.MessageID, Limit: maxScan})
	if err != nil {
		return audit.Record{}, false
	}
	for _, rec := range recs {
		if rec.Step == audit.StepOperator && rec.Decision == done && (rec.PayloadSHA256 == "" || rec.PayloadSHA256 == it.PayloadSHA256) {
			return rec, true
		}
	}
	return audit.Record{}, false
}

// itemKey is the transport key of the delivery whose payload was
// quarantined: its audit records name the message id, and the item's file
// name starts with the key's first 16 hex digits ("" when not found).
func (c *Console) itemKey(r *http.Request, it QuarantineItem) string {
	recs, err := c.src.Audit.Query(r.Context(), audit.Query{Partner: it.Partner, MessageID: it.MessageID, Limit: 1000})
	if err != nil {
		return ""
	}
	_, base, _ := ParseItemID(it.ID)
	k16, _, _ := strings.Cut(base, "-")
	for _, rec := range recs {
		if strings.HasPrefix(rec.Key, k16) && dedup.Key(rec.Key).Valid() {
			return rec.Key
		}
	}
	return ""
}

// discard removes a quarantined payload from the quarantine with a reason.
func (c *Console) discard(w http.ResponseWriter, r *http.Request, who caller) {
	id := r.PostForm.Get("id")
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	it, err := ReadItem(c.src.QuarantineDir, id)
	if err != nil {
		c.itemGone(w, r, who, id, "discarded")
		return
	}
	if reason == "" || len(reason) > 1000 {
		c.notice(w, r, who, http.StatusBadRequest, "", "A discard needs a reason (at most 1000 characters).",
			"/console/quarantine/item?id="+url.QueryEscape(id), "Back to the payload")
		return
	}
	// Audit first: a discard that cannot be audited does not happen. The
	// record names the quarantined delivery's key, which it resolves.
	if err := c.audit(r.Context(), who, audit.Record{Partner: it.Partner, Protocol: it.Protocol, MessageID: it.MessageID, Key: c.itemKey(r, it),
		Reference: it.Reference, PayloadSHA256: it.PayloadSHA256, Decision: "discarded", Error: "reason: " + reason}); err != nil {
		c.fail(w, "auditing the discard", err)
		return
	}
	if err := MoveItem(c.src.QuarantineDir, discardedDir, it); err != nil {
		c.fail(w, "moving the discarded payload", err)
		return
	}
	redirect(w, r, "/console/quarantine", "discarded")
}
