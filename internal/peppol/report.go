package peppol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transaction is the record of one accepted Peppol transaction: the fields
// the Transaction Statistics Report (TSR 1.0) and the End User Statistics
// Report (EUSR 1.1) aggregate.
type Transaction struct {
	Time      time.Time `json:"time"`
	MessageID string    `json:"message_id"`
	Direction string    `json:"direction"` // incoming
	// C2 is the sending AP's seat ID (certificate CN), C3 ours.
	C2               string `json:"c2"`
	C3               string `json:"c3"`
	TransportProfile string `json:"transport_profile"`
	DocTypeScheme    string `json:"doc_type_scheme"`
	DocType          string `json:"doc_type"`
	ProcessScheme    string `json:"process_scheme"`
	Process          string `json:"process"`
	// C1Country is the sender's country (SBDH COUNTRY_C1), C4Country our
	// end user's.
	C1Country string `json:"c1_country,omitempty"`
	C4Country string `json:"c4_country,omitempty"`
	// Sender (C1) and Receiver (C4) are the end users, scheme::value.
	Sender     string `json:"sender"`
	Receiver   string `json:"receiver"`
	InstanceID string `json:"instance_id,omitempty"`
}

// Recorder appends transactions as JSON lines to one file per month
// (transactions-YYYY-MM.jsonl in Dir), synced before Add returns.
type Recorder struct {
	Dir string
	mu  sync.Mutex
}

// Add appends t to its month's file.
func (r *Recorder) Add(t *Transaction) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("peppol: record: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.MkdirAll(r.Dir, 0o750); err != nil {
		return fmt.Errorf("peppol: record: %w", err)
	}
	f, err := os.OpenFile(r.path(t.Time.UTC().Format("2006-01")), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("peppol: record: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("peppol: record %s: %w", t.MessageID, err)
	}
	return nil
}

func (r *Recorder) path(month string) string {
	return filepath.Join(r.Dir, "transactions-"+month+".jsonl")
}

var monthRE = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])$`)

// Month reads the transactions of month ("2026-03"), one per eb:MessageId
// (a retransmission answered with the stored receipt is recorded again).
// A torn last line (a crash during a write) is skipped.
func (r *Recorder) Month(month string) ([]Transaction, error) {
	if !monthRE.MatchString(month) {
		return nil, fmt.Errorf("peppol: month %q is not YYYY-MM", month)
	}
	f, err := os.Open(r.path(month))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("peppol: %w", err)
	}
	defer f.Close()
	var out []Transaction
	seen := map[string]bool{}
	rd := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := rd.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(bytes.TrimSpace(line)) > 0 {
				var t Transaction
				if json.Unmarshal(line, &t) == nil && !seen[t.MessageID] {
					out = append(out, t)
				}
			}
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("peppol: %s: %w", f.Name(), err)
		}
		var t Transaction
		if err := json.Unmarshal(line, &t); err != nil {
			return nil, fmt.Errorf("peppol: %s line %d: %w", f.Name(), n, err)
		}
		if seen[t.MessageID] {
			continue
		}
		seen[t.MessageID] = true
		out = append(out, t)
	}
}

// Specification identifiers of the reports.
const (
	TSRNamespace       = "urn:fdc:peppol:transaction-statistics-report:1.0"
	TSRCustomizationID = "urn:fdc:peppol.eu:edec:trns:transaction-statistics-reporting:1.0"
	EUSRNamespace      = "urn:fdc:peppol:end-user-statistics-report:1.1"
	EUSRCustomization  = "urn:fdc:peppol.eu:edec:trns:end-user-statistics-report:1.1"
	ReportingProfileID = "urn:fdc:peppol.eu:edec:bis:reporting:1.0"
)

type rKey struct {
	MetaSchemeID string `xml:"metaSchemeID,attr"`
	SchemeID     string `xml:"schemeID,attr"`
	Value        string `xml:",chardata"`
}

type reporterID struct {
	SchemeID string `xml:"schemeID,attr"`
	Value    string `xml:",chardata"`
}

type rHeader struct {
	StartDate  string     `xml:"ReportPeriod>StartDate"`
	EndDate    string     `xml:"ReportPeriod>EndDate"`
	ReporterID reporterID `xml:"ReporterID"`
}

type tsrCount struct {
	Incoming int `xml:"Incoming"`
	Outgoing int `xml:"Outgoing"`
}

type tsrSubtotal struct {
	Type string `xml:"type,attr"`
	Keys []rKey `xml:"Key"`
	tsrCount
}

type tsrReport struct {
	XMLName         xml.Name      `xml:"TransactionStatisticsReport"`
	XMLNS           string        `xml:"xmlns,attr"`
	CustomizationID string        `xml:"CustomizationID"`
	ProfileID       string        `xml:"ProfileID"`
	Header          rHeader       `xml:"Header"`
	Total           tsrCount      `xml:"Total"`
	Subtotals       []tsrSubtotal `xml:"Subtotal"`
}

type eusrCounts struct {
	Sending          int `xml:"SendingEndUsers"`
	Receiving        int `xml:"ReceivingEndUsers"`
	SendingReceiving int `xml:"SendingOrReceivingEndUsers"`
}

type eusrSubset struct {
	Type string `xml:"type,attr"`
	Keys []rKey `xml:"Key"`
	eusrCounts
}

type eusrReport struct {
	XMLName         xml.Name     `xml:"EndUserStatisticsReport"`
	XMLNS           string       `xml:"xmlns,attr"`
	CustomizationID string       `xml:"CustomizationID"`
	ProfileID       string       `xml:"ProfileID"`
	Header          rHeader      `xml:"Header"`
	FullSet         eusrCounts   `xml:"FullSet"`
	Subsets         []eusrSubset `xml:"Subset"`
}

func header(month, reporter string) (rHeader, error) {
	start, err := time.Parse("2006-01", month)
	if err != nil {
		return rHeader{}, fmt.Errorf("peppol: month %q is not YYYY-MM", month)
	}
	end := start.AddDate(0, 1, -1)
	return rHeader{StartDate: start.Format(time.DateOnly), EndDate: end.Format(time.DateOnly),
		ReporterID: reporterID{SchemeID: "CertSubjectCN", Value: reporter}}, nil
}

func spKey(v string) rKey { return rKey{"SP", "CertSubjectCN", v} }
func dtKey(t Transaction) rKey {
	return rKey{"DT", or(t.DocTypeScheme, DocTypeScheme), t.DocType}
}
func prKey(t Transaction) rKey {
	return rKey{"PR", or(t.ProcessScheme, ProcessScheme), t.Process}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TSR is the Transaction Statistics Report (1.0) of the month's
// transactions, reported by reporter (our seat ID): the total, per
// transport profile, per sending service provider (C2) with document type
// and process, and the same with sender (C1) and receiver (C4) country for
// transactions whose countries are known.
func TSR(month, reporter string, txs []Transaction) ([]byte, error) {
	h, err := header(month, reporter)
	if err != nil {
		return nil, err
	}
	r := tsrReport{XMLNS: TSRNamespace, CustomizationID: TSRCustomizationID, ProfileID: ReportingProfileID, Header: h}
	type agg struct {
		keys  []rKey
		count tsrCount
	}
	groups := map[string]map[string]*agg{}
	add := func(typ string, t Transaction, keys ...rKey) {
		if groups[typ] == nil {
			groups[typ] = map[string]*agg{}
		}
		var id strings.Builder
		for _, k := range keys {
			id.WriteString(k.SchemeID + "::" + k.Value + "\x00")
		}
		a := groups[typ][id.String()]
		if a == nil {
			a = &agg{keys: keys}
			groups[typ][id.String()] = a
		}
		if t.Direction == "outgoing" {
			a.count.Outgoing++
		} else {
			a.count.Incoming++
		}
	}
	for _, t := range txs {
		if t.Direction == "outgoing" {
			r.Total.Outgoing++
		} else {
			r.Total.Incoming++
		}
		add("PerTP", t, rKey{"TP", "Peppol", or(t.TransportProfile, TransportProfile)})
		add("PerSP-DT-PR", t, spKey(t.C2), dtKey(t), prKey(t))
		if t.C1Country != "" && t.C4Country != "" {
			add("PerSP-DT-PR-CC", t, spKey(t.C2), dtKey(t), prKey(t),
				rKey{"CC", "SenderCountry", t.C1Country}, rKey{"CC", "ReceiverCountry", t.C4Country})
		}
	}
	for _, typ := range []string{"PerTP", "PerSP-DT-PR", "PerSP-DT-PR-CC"} {
		ids := make([]string, 0, len(groups[typ]))
		for id := range groups[typ] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			a := groups[typ][id]
			r.Subtotals = append(r.Subtotals, tsrSubtotal{Type: typ, Keys: a.keys, tsrCount: a.count})
		}
	}
	return marshal(r)
}

// EUSR is the End User Statistics Report (1.1) of the month: the number of
// distinct end users of ours that received (C4) or sent, in total, per
// document type and process, per country, and per document type and
// country.
func EUSR(month, reporter string, txs []Transaction) ([]byte, error) {
	h, err := header(month, reporter)
	if err != nil {
		return nil, err
	}
	r := eusrReport{XMLNS: EUSRNamespace, CustomizationID: EUSRCustomization, ProfileID: ReportingProfileID, Header: h}
	type users struct {
		keys     []rKey
		sending  map[string]bool
		received map[string]bool
	}
	newUsers := func(keys []rKey) *users {
		return &users{keys: keys, sending: map[string]bool{}, received: map[string]bool{}}
	}
	full := newUsers(nil)
	groups := map[string]map[string]*users{}
	add := func(typ string, t Transaction, keys ...rKey) {
		if groups[typ] == nil {
			groups[typ] = map[string]*users{}
		}
		var id strings.Builder
		for _, k := range keys {
			id.WriteString(k.SchemeID + "::" + k.Value + "\x00")
		}
		u := groups[typ][id.String()]
		if u == nil {
			u = newUsers(keys)
			groups[typ][id.String()] = u
		}
		mark(u.sending, u.received, t)
	}
	for _, t := range txs {
		mark(full.sending, full.received, t)
		add("PerDT-PR", t, dtKey(t), prKey(t))
		if t.C4Country != "" {
			cc := rKey{"CC", "EndUserCountry", t.C4Country}
			add("PerEUC", t, cc)
			add("PerDT-EUC", t, dtKey(t), cc)
			add("PerDT-PR-EUC", t, dtKey(t), prKey(t), cc)
		}
	}
	counts := func(u *users) eusrCounts {
		both := map[string]bool{}
		for k := range u.sending {
			both[k] = true
		}
		for k := range u.received {
			both[k] = true
		}
		return eusrCounts{Sending: len(u.sending), Receiving: len(u.received), SendingReceiving: len(both)}
	}
	r.FullSet = counts(full)
	for _, typ := range []string{"PerDT-PR", "PerDT-EUC", "PerDT-PR-EUC", "PerEUC"} {
		ids := make([]string, 0, len(groups[typ]))
		for id := range groups[typ] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			u := groups[typ][id]
			r.Subsets = append(r.Subsets, eusrSubset{Type: typ, Keys: u.keys, eusrCounts: counts(u)})
		}
	}
	return marshal(r)
}

// mark counts our end user of t: the receiver of an incoming transaction,
// the sender of an outgoing one.
func mark(sending, received map[string]bool, t Transaction) {
	if t.Direction == "outgoing" {
		sending[strings.ToLower(t.Sender)] = true
	} else {
		received[strings.ToLower(t.Receiver)] = true
	}
}

func marshal(v any) ([]byte, error) {
	b, err := xml.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("peppol: report: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// WriteReports writes tsr-MONTH.xml and eusr-MONTH.xml into dir and
// returns their paths and the number of transactions.
func WriteReports(r *Recorder, month, reporter, dir string) ([]string, int, error) {
	if reporter == "" {
		return nil, 0, errors.New("peppol: report: no reporter id (peppol.reporter_id, our AP certificate's CN)")
	}
	txs, err := r.Month(month)
	if err != nil {
		return nil, 0, err
	}
	tsr, err := TSR(month, reporter, txs)
	if err != nil {
		return nil, 0, err
	}
	eusr, err := EUSR(month, reporter, txs)
	if err != nil {
		return nil, 0, err
	}
	var paths []string
	for name, b := range map[string][]byte{"tsr-" + month + ".xml": tsr, "eusr-" + month + ".xml": eusr} {
		p := filepath.Join(dir, name)
		if err := writeFileAtomic(p, b); err != nil {
			return nil, 0, err
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths, len(txs), nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return fmt.Errorf("peppol: report: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("peppol: report: %w", err)
	}
	return nil
}
