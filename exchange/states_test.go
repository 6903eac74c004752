package exchange

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/audit"
	"github.com/edigateway/gateway/dedup"
)

// TestStateTableIsComplete: every state is in the transition table, every
// state that is not final has a way on and no final state has one, and the
// table in state's doc comment and the transitions data say the same.
func TestStateTableIsComplete(t *testing.T) {
	in, out := map[state]bool{}, map[state]bool{}
	for _, tr := range transitions {
		out[tr.from], in[tr.to] = true, true
		if tr.from.final() {
			t.Errorf("row %v → %v leaves a final state", tr.from, tr.to)
		}
	}
	for s := stateReceived; s < stateEnd; s++ {
		if _, ok := stateNames[s]; !ok {
			t.Errorf("state %d has no name", s)
		}
		if !in[s] && !out[s] {
			t.Errorf("state %v is not in the transition table", s)
		}
		if !s.final() && !out[s] {
			t.Errorf("state %v is not final but no transition leaves it", s)
		}
		if s != stateReceived && !in[s] {
			t.Errorf("state %v is never reached", s)
		}
	}
	doc := stateDocTable(t)
	for _, tr := range transitions {
		found := false
		for _, row := range doc {
			if row[0] == tr.from.String() && slices.Contains(row, tr.to.String()) {
				found = true
			}
		}
		if !found {
			t.Errorf("transition %v → %v (%s) is not in state's doc comment", tr.from, tr.to, tr.event)
		}
	}
	for _, row := range doc {
		found := false
		for _, tr := range transitions {
			if row[0] == tr.from.String() && slices.Contains(row, tr.to.String()) {
				found = true
			}
		}
		if !found {
			t.Errorf("doc comment row %q is not in transitions", strings.Join(row, " "))
		}
	}
}

// stateDocTable returns the rows of the table in state's doc comment, as
// words.
func stateDocTable(t *testing.T) [][]string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "states.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE || g.Specs[0].(*ast.TypeSpec).Name.Name != "state" {
			continue
		}
		for _, c := range g.Doc.List {
			line := strings.TrimPrefix(c.Text, "//")
			if !strings.HasPrefix(line, "\t") {
				continue
			}
			words := strings.Fields(line)
			if len(words) == 0 || words[0] == "from" {
				continue
			}
			if _, ok := stateByName(words[0]); !ok {
				t.Errorf("doc comment row starts with %q, not a state", words[0])
			}
			rows = append(rows, words)
		}
	}
	if len(rows) == 0 {
		t.Fatal("no table in state's doc comment")
	}
	return rows
}

func stateByName(name string) (state, bool) {
	for s, n := range stateNames {
		if n == name {
			return s, true
		}
	}
	return stateNone, false
}

// TestAuditedDecisionsMapToStates: every decision the pipeline's code
// records is one of the decision constants (no string literal passed as a
// decision), and every decision constant marks a state.
func TestAuditedDecisionsMapToStates(t *testing.T) {
	decisionArg := map[string]int{"audit": 3, "auditTo": 4, "auditBestEffort": 3, "auditBestEffortTo": 4, "record": 2, "driftAudit": 4}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	constants := map[string]string{}
	calls := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if strings.HasPrefix(id.Name, "decision") && i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok {
							constants[id.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				i, ok := decisionArg[sel.Sel.Name]
				if !ok || len(n.Args) <= i {
					return true
				}
				calls++
				if lit, ok := n.Args[i].(*ast.BasicLit); ok && lit.Value != `""` {
					t.Errorf("%s: %s records decision %s as a literal; use a decision constant of states.go",
						fset.Position(n.Pos()), sel.Sel.Name, lit.Value)
				}
			}
			return true
		})
	}
	if calls < 20 {
		t.Fatalf("found only %d audit calls; the scan is broken", calls)
	}
	if len(constants) < 10 {
		t.Fatalf("found only %d decision constants", len(constants))
	}
	for name, value := range constants {
		mapped := false
		for key, states := range decisionStates {
			if strings.SplitN(key, ":", 2)[1] == value && len(states) > 0 {
				mapped = true
			}
		}
		if !mapped {
			t.Errorf("decision %s (%q) marks no state in decisionStates", name, value)
		}
	}
	for key, states := range decisionStates {
		for _, s := range states {
			if s <= stateNone || s >= stateEnd {
				t.Errorf("decisionStates[%q] holds %v", key, s)
			}
		}
	}
}

// fsmReplies are testReplies whose replies can be made to fail.
type fsmReplies struct {
	dupReplies
	failAccepted, failDuplicate, failFailed, failDupInterchange bool
}

var errReplyBuild = errors.New("signing key unreadable")

func (r fsmReplies) Accepted(ctx context.Context) (Reply, error) {
	if r.failAccepted {
		return Reply{}, errReplyBuild
	}
	return r.dupReplies.Accepted(ctx)
}

func (r fsmReplies) Duplicate(ctx context.Context, stored Reply, d dedup.Decision) (Reply, error) {
	if r.failDuplicate {
		return Reply{}, errReplyBuild
	}
	return r.dupReplies.Duplicate(ctx, stored, d)
}

func (r fsmReplies) Failed(ctx context.Context, f *Failure) (Reply, error) {
	if r.failFailed {
		return Reply{}, errReplyBuild
	}
	return r.dupReplies.Failed(ctx, f)
}

func (r fsmReplies) DuplicateInterchange(ctx context.Context, dups []InterchangeDuplicate) (Reply, error) {
	if r.failDupInterchange {
		return Reply{}, errReplyBuild
	}
	return r.dupReplies.DuplicateInterchange(ctx, dups)
}

// reclaimStore is a memory store whose claim again of a drifted key (the
// 1ns window of on_drift: accept) finds the key in flight or fails.
type reclaimStore struct {
	*dedup.MemoryStore
	fail bool
}

func (s reclaimStore) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Decision, error) {
	if req.Window != time.Nanosecond {
		return s.MemoryStore.Claim(ctx, req)
	}
	if s.fail {
		return dedup.Decision{}, fmt.Errorf("dial: %w", dedup.ErrUnavailable)
	}
	return dedup.Decision{Outcome: dedup.InFlight, RetryAfter: 20 * time.Second}, nil
}

// staleRenewer is a memory store whose every renewal finds the claim taken
// over.
type staleRenewer struct{ *dedup.MemoryStore }

func (staleRenewer) RenewClaims(context.Context, []dedup.HeldClaim) error {
	return fmt.Errorf("claim of another token: %w", dedup.ErrStaleClaim)
}

// fsmFixture is a pipeline with a ledger on the memory store, whose
// records a test reads in mem.
type fsmFixture struct {
	*ledgerFixture
	mem *audit.Memory
}

func newFSMFixture(t *testing.T) *fsmFixture {
	f := &fsmFixture{ledgerFixture: newLedgerFixture(t)}
	f.mem = f.a
	return f
}

func (f *fsmFixture) inbound(id string, policy DriftPolicy, payloads ...string) Inbound {
	in := f.proto.inbound("acme", id, payloads[0])
	for _, extra := range payloads[1:] {
		in.Message.Payloads = append(in.Message.Payloads, NewPayload(Payload{SHA256: sha(extra), Size: int64(len(extra))}, MemoryBody(extra)))
	}
	in.Replies = fsmReplies{dupReplies: dupReplies{in.Replies.(testReplies)}}
	in.OnDrift = policy
	return in
}

func (f *fsmFixture) accepted(t *testing.T, id string, payloads ...string) {
	t.Helper()
	if r := f.p.Process(context.Background(), f.inbound(id, "", payloads...)); r.Status != 200 || !strings.HasPrefix(string(r.Body), "receipt") {
		t.Fatalf("first delivery of %s: %d %q", id, r.Status, r.Body)
	}
}

func failing(in Inbound, set func(*fsmReplies)) Inbound {
	r := in.Replies.(fsmReplies)
	set(&r)
	in.Replies = r
	return in
}

// TestTransitionsFollowTheTable drives every transition of the table
// through the pipeline (the memory store; the TxHandler's on SQLite) and
// checks that the delivery moves along rows of the table to the state the
// case expects, that its reply is that state's, and that every audit record
// it writes marks a state it went through. Every row must be driven.
func TestTransitionsFollowTheTable(t *testing.T) {
	const (
		received = stateReceived
		claimed  = stateClaimed
		ics      = stateInterchangesClaimed
		handled  = stateHandled
	)
	ctx := context.Background()
	type fsmCase struct {
		name   string
		setup  func(t *testing.T, f *fsmFixture) Inbound
		want   []state
		status int
	}
	cases := []fsmCase{
		{"new message", func(t *testing.T, f *fsmFixture) Inbound {
			return f.inbound("m1", "", "plain text")
		}, []state{received, claimed, ics, handled, stateAccepted}, 200},
		{"new interchange", func(t *testing.T, f *fsmFixture) Inbound {
			return f.inbound("m1", "", invoic("REF1", "INV-1"))
		}, []state{received, claimed, ics, handled, stateAccepted}, 200},
		{"duplicate", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", invoic("REF1", "INV-1"))
			return f.inbound("m1", "", invoic("REF1", "INV-1"))
		}, []state{received, stateDuplicate}, 200},
		{"stored reply unreadable", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", "A")
			return failing(f.inbound("m1", "", "A"), func(r *fsmReplies) { r.failDuplicate = true })
		}, []state{received, stateFailed}, 500},
		{"drift rejected", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", "A")
			return f.inbound("m1", DriftReject, "B")
		}, []state{received, stateDrift}, 200},
		{"drift quarantined", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", "A")
			return f.inbound("m1", DriftQuarantine, "B")
		}, []state{received, stateQuarantined}, 200},
		{"drift accepted", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", "A")
			f.advance(time.Second) // the claim again replaces a row accepted before now
			return f.inbound("m1", DriftAccept, "B")
		}, []state{received, stateDriftAccepted, claimed, ics, handled, stateAccepted}, 200},
		{"drift accepted, key in flight", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", "A")
			f.p.Store = reclaimStore{MemoryStore: f.st}
			return f.inbound("m1", DriftAccept, "B")
		}, []state{received, stateDriftAccepted, stateInFlight}, 503},
		{"drift accepted, store down", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", "A")
			f.p.Store = reclaimStore{MemoryStore: f.st, fail: true}
			return f.inbound("m1", DriftAccept, "B")
		}, []state{received, stateDriftAccepted, stateUnavailable}, 503},
		{"in flight", func(t *testing.T, f *fsmFixture) Inbound {
			in := f.inbound("m1", "", "A")
			if _, err := f.st.Claim(ctx, dedup.ClaimRequest{Key: in.Message.TransportKey, PayloadSHA256: sha("A")}); err != nil {
				t.Fatal(err)
			}
			return in
		}, []state{received, stateInFlight}, 503},
		{"damaged envelope", func(t *testing.T, f *fsmFixture) Inbound {
			return f.inbound("m1", "", strings.Replace(invoic("REF1", "X"), "UNZ+1+REF1", "UNZ+1+REF2", 1))
		}, []state{received, stateRefused}, 200},
		{"store down", func(t *testing.T, f *fsmFixture) Inbound {
			f.p.Store = failingStore{}
			return f.inbound("m1", "", "A")
		}, []state{received, stateUnavailable}, 503},
		{"claim decision not recorded", func(t *testing.T, f *fsmFixture) Inbound {
			f.p.Audit = audit.Multi{f.mem, failingSink{audit.StepDecision}}
			return f.inbound("m1", "", "A")
		}, []state{received, claimed, stateUnavailable}, 503},
		{"interchange in flight", func(t *testing.T, f *fsmFixture) Inbound {
			in := f.inbound("m1", "", invoic("REF1", "INV-1"))
			pics, err := f.p.extractInterchanges(in.Message)
			if err != nil || len(pics) != 1 {
				t.Fatalf("interchanges %v, %v", pics, err)
			}
			if _, err := f.st.ClaimInterchange(ctx, ledgerClaim(in, pics[0])); err != nil {
				t.Fatal(err)
			}
			return in
		}, []state{received, claimed, stateInFlight}, 503},
		{"interchange drift rejected", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", invoic("REF1", "INV-1"))
			return f.inbound("m2", DriftReject, invoic("REF1", "INV-2"))
		}, []state{received, claimed, stateDrift}, 200},
		{"interchange drift quarantined", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", invoic("REF1", "INV-1"))
			return f.inbound("m2", DriftQuarantine, invoic("REF1", "INV-2"))
		}, []state{received, claimed, stateQuarantined}, 200},
		{"interchange drift, refusal cannot be built", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", invoic("REF1", "INV-1"))
			return failing(f.inbound("m2", DriftReject, invoic("REF1", "INV-2")), func(r *fsmReplies) { r.failFailed = true })
		}, []state{received, claimed, stateFailed}, 500},
		{"interchange twice with different content", func(t *testing.T, f *fsmFixture) Inbound {
			return f.inbound("m1", "", invoic("REF1", "INV-1"), invoic("REF1", "INV-2"))
		}, []state{received, claimed, stateRefused}, 200},
		{"duplicate interchange", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", invoic("REF1", "INV-1"))
			return f.inbound("m2", "", invoic("REF1", "INV-1"))
		}, []state{received, claimed, ics, stateDuplicateInterchange}, 200},
		{"duplicate interchange, reply cannot be built", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", invoic("REF1", "INV-1"))
			return failing(f.inbound("m2", "", invoic("REF1", "INV-1")), func(r *fsmReplies) { r.failDupInterchange = true })
		}, []state{received, claimed, ics, stateFailed}, 500},
		{"duplicate interchange, accept fails", func(t *testing.T, f *fsmFixture) Inbound {
			f.accepted(t, "m1", invoic("REF1", "INV-1"))
			f.p.Store = acceptFailsStore{f.st}
			return f.inbound("m2", "", invoic("REF1", "INV-1"))
		}, []state{received, claimed, ics, stateUnavailable}, 503},
		{"handler fails", func(t *testing.T, f *fsmFixture) Inbound {
			f.h.fn = func(*Message) error { return errors.New("ERP down") }
			return f.inbound("m1", "", invoic("REF1", "INV-1"))
		}, []state{received, claimed, ics, stateAbandoned}, 200},
		{"claim lost while the handler ran", func(t *testing.T, f *fsmFixture) Inbound {
			f.p.Store, f.p.LeaseHeartbeat = staleRenewer{f.st}, 5*time.Millisecond
			f.p.Handler = HandlerFunc(func(ctx context.Context, m *Message) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Second):
					return nil
				}
			})
			return f.inbound("m1", "", "A")
		}, []state{received, claimed, ics, stateClaimLost}, 503},
		{"accept fails", func(t *testing.T, f *fsmFixture) Inbound {
			f.p.Store = acceptFailsStore{f.st}
			return f.inbound("m1", "", invoic("REF1", "INV-1"))
		}, []state{received, claimed, ics, handled, stateUnavailable}, 503},
		{"positive reply cannot be built", func(t *testing.T, f *fsmFixture) Inbound {
			return failing(f.inbound("m1", "", invoic("REF1", "INV-1")), func(r *fsmReplies) { r.failAccepted = true })
		}, []state{received, claimed, ics, handled, stateFailed}, 500},
	}
	// The TxHandler's transitions need a store that accepts in a
	// transaction: SQLite.
	txCases := map[string]bool{} // case name → the TxHandler fails
	txCase := func(name string, fail bool, want []state, status int) fsmCase {
		txCases[name] = fail
		return fsmCase{name, nil, want, status}
	}
	cases = append(cases,
		txCase("transactional handler accepted", false, []state{received, claimed, ics, stateAccepted}, 200),
		txCase("transactional handler fails", true, []state{received, claimed, ics, stateAbandoned}, 200))

	driven := map[transition]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p *Pipeline
			var mem *audit.Memory
			var in Inbound
			if c.setup != nil {
				f := newFSMFixture(t)
				in = c.setup(t, f)
				p, mem = f.p, f.mem
			} else {
				tf := txBackends(t)["sqlite"](t)
				tf.fail.Store(txCases[c.name])
				mem = &audit.Memory{}
				tf.p.Audit = audit.Multi{tf.p.Audit, mem}
				in = tf.proto.inbound("acme", "m1", invoic("REF1", "INV-1"))
				p = tf.p
			}
			before := len(mem.Records())
			d := p.receive(in)
			reply := d.run(ctx)
			if !slices.Equal(d.path, c.want) {
				t.Fatalf("path %v, want %v", d.path, c.want)
			}
			if reply.Status != c.status {
				t.Errorf("reply %d %q, want status %d", reply.Status, reply.Body, c.status)
			}
			for i := 1; i < len(d.path); i++ {
				tr, ok := findTransition(d.path[i-1], d.path[i])
				if !ok {
					t.Errorf("%v → %v is not in the transition table", d.path[i-1], d.path[i])
					continue
				}
				driven[tr] = true
			}
			if last := d.path[len(d.path)-1]; !last.final() {
				t.Errorf("delivery ended in %v, not a final state", last)
			}
			for _, r := range mem.Records()[before:] {
				key := string(r.Step) + ":" + r.Decision
				states, ok := decisionStates[key]
				if !ok {
					t.Errorf("record %s marks no state", key)
					continue
				}
				went := func(s state) bool {
					if slices.Contains(d.path, s) {
						return true
					}
					// A final decision whose answer could not be given.
					last := d.path[len(d.path)-1]
					return (last == stateFailed || last == stateUnavailable) && r.Step == audit.StepDecision && s.final()
				}
				if !slices.ContainsFunc(states, went) {
					t.Errorf("record %s marks %v, none of which the delivery went through (%v)", key, states, d.path)
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	for _, tr := range transitions {
		if !driven[tr] {
			t.Errorf("no case drives %v → %v (%s)", tr.from, tr.to, tr.event)
		}
	}
}

func findTransition(from, to state) (transition, bool) {
	for _, tr := range transitions {
		if tr.from == from && tr.to == to {
			return tr, true
		}
	}
	return transition{}, false
}
