package as2

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edigateway/gateway/dedup"
	"github.com/edigateway/gateway/exchange"
	"github.com/edigateway/gateway/internal/cms"
	"github.com/edigateway/gateway/internal/smime"
	"github.com/edigateway/gateway/mdn"
)

// replies builds the MDNs of one message for the pipeline.
type replies struct {
	e *Endpoint
	x *inbound
}

// Accepted is the processed MDN carrying the message's MIC. The pipeline
// stores it, so that a retransmission's duplicate MDN can carry the same MIC.
func (r *replies) Accepted(ctx context.Context) (exchange.Reply, error) {
	return r.e.buildMDN(r.x, mdn.DispProcessed, "", r.x.mic, r.x.micAlg.spelled)
}

// Duplicate answers a retransmission of an accepted message: a new MDN
// (signed as this request asks) with the disposition the partner agreement
// names for duplicates and the Received-Content-MIC of the stored MDN.
func (r *replies) Duplicate(ctx context.Context, stored exchange.Reply, d dedup.Decision) (exchange.Reply, error) {
	p, err := mdn.ParseHTTP(stored.Header, stored.Body)
	if err != nil {
		return exchange.Reply{}, fmt.Errorf("as2: duplicate: stored MDN: %w", err)
	}
	mic, alg := splitMIC(p.Fields.Get("Received-Content-MIC"))
	if mic == "" {
		mic, alg = r.x.mic, r.x.micAlg.spelled
	}
	disp := mdn.DispDuplicateDocument
	if r.x.partner.AS2.DuplicateDisposition == "processed" {
		disp = mdn.DispProcessed
	}
	text := fmt.Sprintf("The AS2 message %s is a duplicate of a message received on %s and accepted then; it was not processed again.",
		r.x.req.MessageID, d.FirstSeen.UTC().Format(time.RFC1123))
	return r.e.buildMDN(r.x, disp, text, mic, alg)
}

// DuplicateInterchange answers a message under a new Message-ID whose every
// interchange was accepted before (an EDI resend): the duplicate
// disposition with this message's MIC, naming the interchanges.
func (r *replies) DuplicateInterchange(ctx context.Context, dups []exchange.InterchangeDuplicate) (exchange.Reply, error) {
	disp := mdn.DispDuplicateDocument
	if r.x.partner.AS2.DuplicateDisposition == "processed" {
		disp = mdn.DispProcessed
	}
	var refs []string
	for _, d := range dups {
		refs = append(refs, fmt.Sprintf("%s interchange %s from %s (first received %s)", d.Interchange.Standard,
			d.Interchange.Reference, d.Interchange.Sender, d.FirstSeen.UTC().Format(time.RFC3339)))
	}
	text := fmt.Sprintf("The AS2 message %s carries only interchanges that were received and accepted before: %s. They were not processed again.",
		r.x.req.MessageID, strings.Join(refs, "; "))
	return r.e.buildMDN(r.x, disp, text, r.x.mic, r.x.micAlg.spelled)
}

// HandlerFailedRetryAfter is the Retry-After of the HTTP 503 that answers
// a message the business handler failed on.
const HandlerFailedRetryAfter = 60 * time.Second

// Failed answers a message the pipeline did not accept. A handler failure
// is transient (the back end is down, the disk is full): it gets HTTP 503
// with Retry-After and no MDN, in every MDN mode, because AS2 senders
// (ours included) take a negative MDN as a final refusal and never
// retransmit, while they retry a 503. Payload drift or quarantine (naming
// what clashed and both hashes) and a damaged business envelope are
// permanent, the same bytes would be refused again: they get the negative
// MDN. The text gives the pipeline's partner-safe reason and the incident
// reference; the detail (f.Err) stays in our log and audit.
func (r *replies) Failed(ctx context.Context, f *exchange.Failure) (exchange.Reply, error) {
	id := r.x.req.MessageID
	var text string
	switch f.Kind {
	case exchange.HandlerFailed:
		// The handler's error stays in our log: it may name internal systems.
		return handlerFailedReply(id, f.Incident), nil
	case exchange.Drift, exchange.Quarantined:
		text = fmt.Sprintf("The AS2 message %s was not processed: %s. A changed document needs a new Message-ID and interchange reference.", id, f.Reason)
		if f.StoredSHA256 != "" && !strings.Contains(text, f.StoredSHA256) {
			text += fmt.Sprintf(" (stored payload SHA-256 %s, this delivery %s)", f.StoredSHA256, f.PayloadSHA256)
		}
	case exchange.Damaged:
		text = fmt.Sprintf("The AS2 message %s was not processed: %s.", id, exchange.DamagedText(f.Reason))
	default:
		return exchange.Reply{}, fmt.Errorf("as2: no MDN for failure kind %s", f.Kind)
	}
	if f.Incident != "" {
		text += " Incident " + f.Incident + ": quote it when you ask us about this message."
	}
	return r.e.buildMDN(r.x, mdn.DispUnexpectedProcessingError, text, r.x.mic, r.x.micAlg.spelled)
}

// handlerFailedReply is the HTTP 503 of a message the handler failed on:
// Retry-After in whole seconds and a plain-text reason with the incident
// (audit disposition "http-503"). The endpoint writes it as is, so no MDN
// is sent or queued; the pipeline stored nothing, so the retransmission is
// processed anew.
func handlerFailedReply(messageID, incident string) exchange.Reply {
	text := fmt.Sprintf("The AS2 message %s was not accepted: it could not be processed at this time; please retransmit it later", messageID)
	if incident != "" {
		text += " (" + exchange.IncidentNote(incident) + ")"
	}
	text += "."
	return exchange.Reply{
		Status: http.StatusServiceUnavailable,
		Header: http.Header{
			"Retry-After":  {strconv.FormatInt(int64(HandlerFailedRetryAfter/time.Second), 10)},
			"Content-Type": {"text/plain; charset=utf-8"},
		},
		Body:        []byte(text + "\n"),
		Disposition: "http-503",
	}
}

// splitMIC splits a Received-Content-MIC value into digest and algorithm,
// keeping the algorithm's spelling.
func splitMIC(v string) (mic, alg string) {
	v = strings.TrimSpace(v)
	i := strings.LastIndex(v, ",")
	if i < 0 {
		return v, ""
	}
	return strings.TrimSpace(v[:i]), strings.TrimSpace(v[i+1:])
}

// buildMDN makes an MDN reply for x: signed when x asks for it, with our
// AS2 id (the AS2-To the partner used) as AS2-From.
func (e *Endpoint) buildMDN(x *inbound, d mdn.Disposition, text, mic, micAlgSpelled string) (exchange.Reply, error) {
	req := x.req
	id, err := e.newMessageID(req.To)
	if err != nil {
		return exchange.Reply{}, err
	}
	rep := mdn.Report{
		ReportingUA:       e.cfg.ReportingUA,
		OriginalRecipient: req.To,
		FinalRecipient:    req.To,
		OriginalMessageID: req.MessageID,
		MIC:               mic,
		MICAlg:            micAlgSpelled,
		Disposition:       d,
		HumanText:         text,
		AS2From:           req.To,
		AS2To:             req.From,
		MessageID:         id,
	}
	h := rep.Headers()
	var ct string
	var body []byte
	if x.signMDN {
		kp := x.signKeys[0] // the key of the identity the partner addressed
		micalg, err := smime.NormalizeMICAlg(x.signDigest)
		if err != nil {
			return exchange.Reply{}, fmt.Errorf("as2: mdn: %w", err)
		}
		ct, body, err = mdn.Sign(mdn.BuildEntity(rep), micalg, func(content []byte) ([]byte, error) {
			return cms.Sign(content, kp.Cert, kp.Key, cms.SignOptions{Digest: x.signDigest, SigningTime: e.now()})
		})
		if err != nil {
			return exchange.Reply{}, fmt.Errorf("as2: mdn: %w", err)
		}
	} else {
		ct, body = mdn.Build(rep)
	}
	h.Set("Content-Type", ct)
	return exchange.Reply{Status: http.StatusOK, Header: h, Body: body, Disposition: dispositionText(d)}, nil
}

// newMessageID returns a fresh Message-ID for an MDN we send.
func (e *Endpoint) newMessageID(ourID string) (string, error) {
	r, err := randomHex(12)
	if err != nil {
		return "", err
	}
	host := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' {
			return c
		}
		return -1
	}, ourID)
	if host == "" {
		host = "gateway"
	}
	return fmt.Sprintf("<mdn-%d-%s@%s>", e.now().UnixMilli(), r, host), nil
}

// dispositionText is the disposition without its modes, for audit and
// logs: "processed", "processed/error: decryption-failed".
func dispositionText(d mdn.Disposition) string {
	s := d.String()
	if i := strings.Index(s, ";"); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}
