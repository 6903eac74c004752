package pickup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edigateway/gateway/outbound"
)

func TestParseSidecar(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []outbound.Property
	}{
		{"", nil},
		{"# only a comment\n\n   \n\t# another\n", nil},
		{"A=1", []outbound.Property{{Name: "A", Value: "1"}}},
		{"B=2\nA=1\n", []outbound.Property{{Name: "B", Value: "2"}, {Name: "A", Value: "1"}}},
		{"\xef\xbb\xbfA=1\r\nB=\r\n", []outbound.Property{{Name: "A", Value: "1"}, {Name: "B", Value: ""}}},
		{" \tName \t= value with = and # \n", []outbound.Property{{Name: "Name", Value: " value with = and # "}}},
		{"A=Straße\n", []outbound.Property{{Name: "A", Value: "Straße"}}},
	} {
		got, err := parseSidecar([]byte(c.in), "")
		if err != nil || !outbound.EqualProperties(got, c.want) {
			t.Errorf("parseSidecar(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for in, line := range map[string]int{"A=1\nB\n": 2, "A=1\r\nA=2\r\n": 2, "\n\n=1\n": 3, "A=\x00\n": 1, "A=1\r\r\n": 1} {
		_, err := parseSidecar([]byte(in), "")
		var se *SidecarError
		if !errors.As(err, &se) || se.Line != line || !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", line)) {
			t.Errorf("parseSidecar(%q): %v, want an error at line %d", in, err, line)
		}
	}
	if _, err := parseSidecar([]byte("A=1\nfilename=x\n"), "FileName"); err == nil || !strings.Contains(err.Error(), "line 2: ") {
		t.Errorf("a property named as the file-name property: %v", err)
	}
}

func TestFileKeyWithProperties(t *testing.T) {
	mtime := time.Unix(1700000000, 5)
	// Without properties: the key files got before sidecars.
	h := sha256.Sum256([]byte("inv.edi\x003\x00" + fmt.Sprint(mtime.UnixNano()) + "\x00abc"))
	if got, want := FileKey("inv.edi", 3, mtime, "abc"), "file-"+hex.EncodeToString(h[:16]); got != want {
		t.Fatalf("FileKey without properties = %s, want %s", got, want)
	}
	a, b := outbound.Property{Name: "A", Value: "1"}, outbound.Property{Name: "B", Value: "2"}
	keys := map[string]string{}
	for what, ps := range map[string][]outbound.Property{"none": nil, "a": {a}, "ab": {a, b}, "ba": {b, a},
		"a=1b": {{Name: "A", Value: "1B"}}, "a1b": {{Name: "A1", Value: "B"}}} {
		k := FileKey("inv.edi", 3, mtime, "abc", ps...)
		if other, ok := keys[k]; ok {
			t.Errorf("properties %s and %s give the same key", what, other)
		}
		keys[k] = what
	}
}

// FuzzParseSidecar: no panic; what is accepted passes the queue's rules,
// and written back as NAME=VALUE lines reads the same.
func FuzzParseSidecar(f *testing.F) {
	for _, s := range []string{
		bdewSidecar,
		"\xef\xbb\xbf# BOM\r\nBDEWDocumentType=UTILMD\r\nBDEWDocumentNo=4711\r\n",
		"A=1\nB\n",
		"=x\n",
		"A=1\na=2\n",
		"MimeType=text/plain\n",
		"A=a\tb\n",
		"A=\xff\n",
		"  Name  =  spaced value  \n#c\n\n",
		"FileName=x.edi\n",
		"A=" + strings.Repeat("v", 1025),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := parseSidecar(b, "FileName")
		if err != nil {
			var se *SidecarError
			if !errors.As(err, &se) || se.Line < 1 {
				t.Fatalf("error %v is not a *SidecarError with a line", err)
			}
			return
		}
		if err := outbound.ValidateProperties(ps); err != nil {
			t.Fatalf("accepted properties the queue refuses: %v", err)
		}
		var back strings.Builder
		for _, p := range ps {
			if strings.EqualFold(p.Name, "FileName") {
				t.Fatalf("accepted the file-name property %q", p.Name)
			}
			back.WriteString(p.Name + "=" + p.Value + "\n")
		}
		again, err := parseSidecar([]byte(back.String()), "FileName")
		if err != nil || !outbound.EqualProperties(again, ps) {
			t.Fatalf("written back: %q, %v; want %q", again, err, ps)
		}
	})
}

// FuzzParseQueuedSidecar: no panic; a name accepted splits into a
// non-empty id without "--" and a non-empty name that give it back; the
// name of a payload's queued sidecar is accepted.
func FuzzParseQueuedSidecar(f *testing.F) {
	for _, s := range []string{".06h4gcq5pp6rt6imbd7tjstjm8--utilmd.edi.properties", ".x--a--b.properties", ".--a.properties",
		".x--.properties", "x--a.properties", ".x--a", ".properties", "..properties", ".x--a.properties.properties", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, n string) {
		id, name, ok := parseQueuedSidecar(n)
		if !ok {
			return
		}
		if id == "" || name == "" || strings.Contains(id, "--") || queuedSidecarName(id, name) != n {
			t.Fatalf("parseQueuedSidecar(%q) = %q, %q", n, id, name)
		}
		if id2, name2, ok := parseQueuedSidecar(queuedSidecarName(id, name+"x")); !ok || id2 != id || name2 != name+"x" {
			t.Fatalf("queuedSidecarName(%q, %q) not parsed back: %q, %q, %v", id, name+"x", id2, name2, ok)
		}
	})
}
