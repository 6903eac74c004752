package console

import (
	"context"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/edigateway/gateway/audit"
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
	Records     []audit.Record
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
// first. Operator records are not deliveries.
func deliveries(recs []audit.Record) []*Delivery {
	var out []*Delivery
	current := map[string]*Delivery{}
	for _, r := range recs {
		if r.Step == audit.StepOperator {
			continue
		}
		id := r.Key
		if id == "" {
			id = r.Partner + "\x00" + r.MessageID
		}
		d := current[id]
		if d == nil || r.Step == audit.StepReceived {
			d = &Delivery{Time: r.Time, Partner: r.Partner, Protocol: r.Protocol, MessageID: r.MessageID, Key: r.Key}
			current[id] = d
			out = append(out, d)
		}
		d.Records = append(d.Records, r)
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
	return out
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
	case has["rejected"]:
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
	Max    int
}

func countHourly(ds []*Delivery, now time.Time) hourly {
	end := now.Truncate(time.Hour).Add(time.Hour)
	h := hourly{Start: end.Add(-24 * time.Hour), Counts: map[string]map[string][]int{}}
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
		h.Max = max(h.Max, totals[p][i])
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
