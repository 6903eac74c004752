package audit

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// sameAsMarshal fails when appendRecordJSON's bytes differ from
// json.Marshal's for r.
func sameAsMarshal(t *testing.T, r Record) {
	t.Helper()
	want, werr := json.Marshal(r)
	got, gerr := appendRecordJSON(nil, r)
	if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("record %+v:\n got %s (%v)\nwant %s (%v)", r, got, gerr, want, werr)
	}
}

// TestAppendRecordJSONIsMarshal: the JSON-lines file's encoder writes what
// json.Marshal wrote before it, byte for byte: every field, omitempty, the
// escapes of quotes, controls, HTML characters, invalid UTF-8 and U+2028,
// and times of any zone (those json.Marshal formats its own way or refuses
// go through it).
func TestAppendRecordJSONIsMarshal(t *testing.T) {
	base := time.Date(2026, 12, 4, 22, 15, 37, 437564820, time.UTC)
	odd := "a\"b\\c\b\f\n\r\t\x00\x1f<tag>&amp; ünï \xff\xfe \u2028\u2029 😀 end"
	for _, r := range []Record{
		{},
		{Time: base, Step: StepReceived, Partner: "demo", Protocol: "as2", MessageID: "1796422535415.7ed85d966be52f34@DEMO",
			Key: "45f10819bea2", InterchangeKey: "91fb", Reference: "LXHOUF30000006", PayloadSHA256: "87e6"},
		{Time: base.Truncate(time.Second), Step: StepReply, Decision: "accepted", Disposition: "processed", Error: odd,
			Incident: "GW-7K3QX9", Actor: "client certificate CN=ops"},
		{Time: base.In(time.FixedZone("plus", 5*3600+30*60)), Step: Step(odd), Partner: odd, Protocol: odd, MessageID: odd,
			Key: odd, InterchangeKey: odd, Reference: odd, Decision: odd, PayloadSHA256: odd, Disposition: odd,
			Error: odd, Incident: odd, Actor: odd},
		{Time: base.In(time.FixedZone("seconds", 3600+17))},
		{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Time: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		sameAsMarshal(t, r)
	}
}

func FuzzAppendRecordJSON(f *testing.F) {
	f.Add("demo", "1796422535415.7ed85d966be52f34@DEMO", "a\"b\\c\n<&>", "\xff\u2028", int64(1796422535415000000))
	f.Add("", "", "", "", int64(0))
	f.Fuzz(func(t *testing.T, partner, id, errText, actor string, nanos int64) {
		sameAsMarshal(t, Record{Time: time.Unix(0, nanos).UTC(), Step: Step(errText), Partner: partner, Protocol: "as4",
			MessageID: id, Key: id, Error: errText, Actor: actor})
	})
}

func BenchmarkRecordEncode(b *testing.B) {
	r := Record{Time: time.Now().UTC(), Step: StepReceived, Partner: "demo", Protocol: "as2",
		MessageID: "1796422535415.7ed85d966be52f34c9d77897@DEMO", Key: "45f10819bea241918c1c75836c1ca6c7fc3bf25f8a1aba39cd2af96a044d1fa9",
		InterchangeKey: "91fbc770136b992031ea7b1d706de96269fcdbdb5f519308d9fcfa31e06e8526", Reference: "LXHOUF30000006",
		PayloadSHA256: "87e626236ce5e5651dbf7472338d47ea876dbb5e18bc3688c9f7482658c883ba"}
	b.Run("appendRecordJSON", func(b *testing.B) {
		for range b.N {
			appendRecordJSON(make([]byte, 0, 512), r)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for range b.N {
			json.Marshal(r)
		}
	})
}
