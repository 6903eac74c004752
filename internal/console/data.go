package console

import (
	"context"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// Delivery is one exchange of a message as the audit shows it: the records
// from a "received" step up to the next one of the same transport key.
type Delivery struct {
	Time           time.Time
	Partner        string
	Protocol       string
	MessageID      string
	Key            string
	Reference      string
	InterchangeKey string
	// Outcome is the console's one-word verdict (outcomes).
	Outcome     string
	Disposition string
	Incident    string
	// Claimed is the sender a refused message claimed to be (its AS2-From
	// or first eb:From PartyId) when no partner agreement matched it:
	// Partner is then empty.
	Claimed string
	// PayloadSHA256 is the first payload hash the records name.
	PayloadSHA256 string
	// Resolved is the operator's release or discard of a quarantined
	// delivery (nil: none yet).
	Resolved *audit.Record
	Records  []audit.Record
}

// PartnerShown is the partner column: the partner id, or what an unknown
// sender claimed to be.
func (d *Delivery) PartnerShown() string {
	if d.Partner != "" {
		return d.Partner
	}
	return d.Claimed
}

// outcomes are the verdicts, in the chart's stacking order.
var outcomes = []string{"processed", "duplicate", "drift", "quarantined", "rejected", "failed", "in-flight", "unavailable", "error", "pending"}

var outcomeColor = map[string]string{
	"processed": "#2e7d32", "duplicate": "#1565c0", "drift": "#ef6c00", "quarantined": "#6a1b9a",
	"rejected": "#c62828", "failed": "#ad1457", "in-flight": "#9e9e9e", "unavailable": "#5d4037",
	"error": "#000000", "pending": "#bdbdbd",
}

// attention are the outcomes an operator must look at.
var attention = map[string]bool{"drift": true, "quarantined": true, "rejected": true, "failed": true, "error": true}

// deliveries groups audit records (oldest first) into deliveries, oldest
// first. A delivery starts with its "received" record, or with the first
// record of its key after a reply (a message refused before the pipeline
// has only its reply record, and a duplicate in the store's own
// transaction has no "received" record in the store). Operator records are
// not deliveries: a release or discard marks the quarantined delivery it
// resolved (Delivery.Resolved). Records of sending (submit, send) are
// not deliveries either.
func deliveries(recs []audit.Record) []*Delivery {
	var out []*Delivery
	var ops []audit.Record
	current := map[string]*Delivery{}
	replied := map[*Delivery]bool{}
	for _, r := range recs {
		if r.Step == audit.StepOperator {
			ops = append(ops, r)
			continue
		}
		if r.Step == audit.StepSubmit || r.Step == audit.StepSend || r.Step == audit.StepMDN {
			continue // sending, not a delivery to us: the outbound queue shows it
		}
		id := r.Key
		if id == "" {
			id = r.Partner + "\x00" + r.MessageID
		}
		d := current[id]
		if d == nil || r.Step == audit.StepReceived || replied[d] && r.Step != audit.StepDelivery {
			d = &Delivery{Time: r.Time, Partner: r.Partner, Protocol: r.Protocol, MessageID: r.MessageID, Key: r.Key}
			current[id] = d
			out = append(out, d)
		}
		if r.Step == audit.StepReply {
			replied[d] = true
		}
		d.Records = append(d.Records, r)
		if d.PayloadSHA256 == "" && r.PayloadSHA256 != "" {
			d.PayloadSHA256 = r.PayloadSHA256
		}
		if d.Partner == "" && d.Claimed == "" {
			d.Claimed = claimedSender(r)
		}
		if d.Reference == "" && r.Reference != "" {
			d.Reference = r.Reference
		}
		if d.InterchangeKey == "" && r.InterchangeKey != "" {
			d.InterchangeKey = r.InterchangeKey
		}
		if r.Disposition != "" {
			d.Disposition = r.Disposition
		}
		if r.Incident != "" {
			d.Incident = r.Incident
		}
	}
	for _, d := range out {
		d.Outcome = outcomeOf(d.Records)
	}
	resolve(out, ops)
	return out
}

// resolve marks the quarantined deliveries that an operator released or
// discarded since: the operator record names the delivery's transport key
// (or, in records written before it did, its partner and message id) and
// the quarantined payload's hash.
func resolve(ds []*Delivery, ops []audit.Record) {
	for i := range ops {
		op := &ops[i]
		switch op.Decision {
		case "released", "released-again", "discarded":
		default:
			continue
		}
		for _, d := range ds {
			if d.Outcome != "quarantined" || d.Resolved != nil || op.Time.Before(d.Time) {
				continue
			}
			if op.Key != "" && op.Key != d.Key || op.Key == "" && (op.Partner != d.Partner || op.MessageID != d.MessageID) {
				continue
			}
			if op.PayloadSHA256 != "" && !d.quarantinedHash(op.PayloadSHA256) {
				continue
			}
			d.Resolved = op
			break
		}
	}
}

// quarantinedHash reports whether the delivery carried payload hash sum
// (a drift record names the received hash in its text, the received
// record the message's hash).
func (d *Delivery) quarantinedHash(sum string) bool {
	for _, r := range d.Records {
		if r.PayloadSHA256 == sum || strings.Contains(r.Error, sum) {
			return true
		}
	}
	return false
}

// The sentences the AS2 and AS4 endpoints refuse an unknown sender with
// (as2.Endpoint and as4/endpoint: "no trading partner agreement for …"),
// with the sender's claimed id quoted by %q.
var (
	claimedAS2 = regexp.MustCompile(`no trading partner agreement for AS2-From ("(?:[^"\\]|\\.)*")`)
	claimedAS4 = regexp.MustCompile(`no trading partner agreement for eb:From PartyId ("(?:[^"\\]|\\.)*")`)
)

// claimedSender is the sender an unknown-partner refusal names. For AS2
// the claimed AS2-From must also be the one the record's transport key was
// derived from.
func claimedSender(r audit.Record) string {
	if r.Partner != "" || r.Decision != "rejected" {
		return ""
	}
	re := claimedAS4
	if r.Protocol == "as2" {
		re = claimedAS2
	}
	m := re.FindStringSubmatch(r.Error)
	if m == nil {
		return ""
	}
	s, err := strconv.Unquote(m[1])
	if err != nil || s == "" {
		return ""
	}
	if r.Protocol == "as2" && r.Key != string(dedup.TransportKey("as2", "as2", s, r.MessageID)) {
		return ""
	}
	return s
}

// outcomeOf judges a delivery by its records.
func outcomeOf(recs []audit.Record) string {
	has := map[string]bool{}
	reply := ""
	handlerErr := false
	for _, r := range recs {
		switch r.Step {
		case audit.StepDecision:
			has[r.Decision] = true
		case audit.StepHandler:
			handlerErr = handlerErr || r.Decision == "error"
		case audit.StepReply:
			if r.Decision != "" {
				reply = r.Decision
			}
		}
	}
	switch {
	case has["quarantined"]:
		return "quarantined"
	case has["drift"]:
		return "drift"
	case has["rejected"] || reply == "rejected":
		// "rejected" as a reply: refused by the endpoint before the
		// pipeline (unknown partner, signature, decryption, P-Mode).
		return "rejected"
	case reply == "accepted":
		return "processed"
	case has["duplicate"] || reply == "duplicate-interchange":
		return "duplicate"
	case handlerErr:
		return "failed"
	case has["in-flight"] || has["in-flight-interchange"]:
		return "in-flight"
	case reply == "unavailable":
		return "unavailable"
	case reply == "error":
		return "error"
	}
	return "pending"
}

// maxScan bounds the audit records a page reads.
const maxScan = 20000

// recent reads the deliveries whose records fall in [from, to) (newest
// maxScan records), oldest first.
func (c *Console) recent(ctx context.Context, q audit.Query) ([]*Delivery, error) {
	q.Newest, q.Limit = true, maxScan
	recs, err := c.src.Audit.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	slices.Reverse(recs)
	return deliveries(recs), nil
}

// hourly counts deliveries per hour, protocol and outcome over the 24 hours
// up to now.
type hourly struct {
	Start  time.Time
	Counts map[string]map[string][]int // protocol → outcome → 24 counts
	// Max is each protocol's largest hourly count: each protocol's panel
	// has its own scale, so that a few AS4 messages beside hundreds of AS2
	// ones still show.
	Max map[string]int
}

func countHourly(ds []*Delivery, now time.Time) hourly {
	end := now.Truncate(time.Hour).Add(time.Hour)
	h := hourly{Start: end.Add(-24 * time.Hour), Counts: map[string]map[string][]int{}, Max: map[string]int{}}
	totals := map[string][]int{}
	for _, d := range ds {
		if d.Time.Before(h.Start) || !d.Time.Before(end) {
			continue
		}
		i := int(d.Time.Sub(h.Start) / time.Hour)
		p := d.Protocol
		if h.Counts[p] == nil {
			h.Counts[p] = map[string][]int{}
			totals[p] = make([]int, 24)
		}
		if h.Counts[p][d.Outcome] == nil {
			h.Counts[p][d.Outcome] = make([]int, 24)
		}
		h.Counts[p][d.Outcome][i]++
		totals[p][i]++
		h.Max[p] = max(h.Max[p], totals[p][i])
	}
	return h
}

var driftHashes = regexp.MustCompile(`with payload SHA-256 ([0-9a-f]{64}); this delivery has payload SHA-256 ([0-9a-f]{64})`)

// DriftHashes are the two payload hashes of a drift decision.
type DriftHashes struct {
	What, Decision   string
	Stored, Received string
	Time             time.Time
}

func driftOf(recs []audit.Record) []DriftHashes {
	var out []DriftHashes
	for _, r := range recs {
		if r.Step != audit.StepDecision {
			continue
		}
		m := driftHashes.FindStringSubmatch(r.Error)
		if m == nil {
			continue
		}
		what, _, _ := strings.Cut(r.Error, " was accepted on ")
		out = append(out, DriftHashes{What: what, Decision: r.Decision, Stored: m[1], Received: m[2], Time: r.Time})
	}
	return out
}

func newestFirst(ds []*Delivery) []*Delivery {
	out := slices.Clone(ds)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	return out
}
