package mdn

import (
	"errors"
	"testing"
)

func TestDispositionString(t *testing.T) {
	const pre = "automatic-action/MDN-sent-automatically; "
	cases := []struct {
		d    Disposition
		want string
	}{
		{DispProcessed, pre + "processed"},
		{DispDecryptionFailed, pre + "processed/error: decryption-failed"},
		{DispAuthenticationFailed, pre + "processed/error: authentication-failed"},
		{DispIntegrityCheckFailed, pre + "processed/error: integrity-check-failed"},
		{DispUnexpectedProcessingError, pre + "processed/error: unexpected-processing-error"},
		{DispDecompressionFailed, pre + "processed/error: decompression-failed"},
		{DispInsufficientMessageSecurity, pre + "processed/error: insufficient-message-security"},
		{DispUnknownTradingPartner, pre + "processed/error: unknown-trading-partner"},
		{DispDuplicateDocument, pre + "processed/warning: duplicate-document"},
		{DispUnsupportedFormat, pre + "failed/failure: unsupported format"},
		{DispUnsupportedMICAlgorithms, pre + "failed/failure: unsupported MIC-algorithms"},
		{DispSenderEqualsReceiver, pre + "failed/failure: sender-equals-receiver"},
		{Disposition{}, pre + "processed"},
		{Disposition{ActionMode: ActionManual, SendingMode: SendingManual, Type: TypeProcessed, Modifier: ModifierWarning},
			"manual-action/MDN-sent-manually; processed/warning"},
		{ProcessedError("bad\r\nInjected: x"), pre + "processed/error: bad  Injected: x"},
	}
	for _, c := range cases {
		if got := c.d.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestParseDisposition(t *testing.T) {
	cases := []struct {
		in   string
		want Disposition
	}{
		{"automatic-action/MDN-sent-automatically; processed", DispProcessed},
		{"  automatic-action/MDN-sent-automatically;processed  ", DispProcessed},
		{"Automatic-Action/MDN-Sent-Automatically;Processed/Error:Decryption-Failed", DispDecryptionFailed},
		{"automatic-action/MDN-sent-automatically; processed/Error: authentication-failed", DispAuthenticationFailed},
		{"automatic-action/MDN-sent-automatically;\r\n\tprocessed/error:\t integrity-check-failed", DispIntegrityCheckFailed},
		{"automatic-action/MDN-sent-automatically; processed/error: unknown-trading-relationship", DispUnknownTradingPartner},
		{"automatic-action/MDN-sent-automatically; processed/error: Unknown-Trading-Partner", DispUnknownTradingPartner},
		{"automatic-action/MDN-sent-automatically; processed/warning: duplicate-document", DispDuplicateDocument},
		{"automatic-action/MDN-sent-automatically; failed/Failure: unsupported MIC-algorithms", DispUnsupportedMICAlgorithms},
		{"automatic-action / MDN-sent-automatically ; processed / error : unexpected-processing-error", DispUnexpectedProcessingError},
		{"manual-action/MDN-sent-manually; processed/warning: something   odd here",
			Disposition{ActionManual, SendingManual, TypeProcessed, ModifierWarning, "something odd here"}},
		{"processed", Disposition{Type: TypeProcessed}},
		{"automatic-action/MDN-sent-automatically; processed/error", Disposition{ActionAutomatic, SendingAutomatic, TypeProcessed, ModifierError, ""}},
	}
	for _, c := range cases {
		got, err := ParseDisposition(c.in)
		if err != nil {
			t.Errorf("ParseDisposition(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseDisposition(%q) = %#v, want %#v", c.in, got, c.want)
		}
	}
}

func TestParseDispositionInvalid(t *testing.T) {
	for _, in := range []string{
		"",
		"   \r\n ",
		"automatic-action; processed",
		"automatic-action/MDN-sent-automatically; ",
		"automatic-action/MDN-sent-automatically; processed failed",
		"/MDN-sent-automatically; processed",
		"automatic-action/; processed",
		"automatic-action/MDN-sent-automatically; /error: x",
	} {
		if d, err := ParseDisposition(in); !errors.Is(err, ErrInvalidDisposition) {
			t.Errorf("ParseDisposition(%q) = %#v, %v; want ErrInvalidDisposition", in, d, err)
		}
	}
}

func TestDispositionPredicates(t *testing.T) {
	cases := []struct {
		d                         Disposition
		processed, warning, isErr bool
	}{
		{DispProcessed, true, false, false},
		{DispDuplicateDocument, true, true, false},
		{DispDecryptionFailed, false, false, true},
		{DispUnsupportedFormat, false, false, true},
		{Disposition{Type: "denied"}, false, false, true},
	}
	for _, c := range cases {
		if c.d.IsProcessed() != c.processed || c.d.IsWarning() != c.warning || c.d.IsError() != c.isErr {
			t.Errorf("%v: IsProcessed=%v IsWarning=%v IsError=%v, want %v %v %v",
				c.d, c.d.IsProcessed(), c.d.IsWarning(), c.d.IsError(), c.processed, c.warning, c.isErr)
		}
	}
}

// FuzzParseDisposition checks that parsing never panics and that String of a
// parsed value is a fixed point of parse+String.
func FuzzParseDisposition(f *testing.F) {
	for _, s := range []string{
		"automatic-action/MDN-sent-automatically; processed",
		"automatic-action/MDN-sent-automatically; processed/error: decryption-failed",
		"automatic-action/MDN-sent-automatically; processed/warning: duplicate-document",
		"automatic-action/MDN-sent-automatically; failed/failure: unsupported format",
		"processed",
		"a/b; c/d: e: f; g",
		"a/b/c; processed/x/y: \x01z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDisposition(s)
		if err != nil {
			return
		}
		s1 := d.String()
		d2, err := ParseDisposition(s1)
		if err != nil {
			t.Fatalf("ParseDisposition(%q) (String of %#v): %v", s1, d, err)
		}
		if s2 := d2.String(); s2 != s1 {
			t.Fatalf("not a fixed point: %q -> %q", s1, s2)
		}
	})
}
