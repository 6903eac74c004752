package partners

import (
	"reflect"
	"testing"

	"github.com/edigateway/gateway/internal/docscheck"
)

// TestConfigurationReferenceNamesEveryPartnerField fails, naming the
// field, when a partner-file field (a yaml field of Partner, at any depth,
// the trust fields of as2 and as4 included) is not written, in backquotes,
// in the "Partner file fields" section of docs/configuration.md.
func TestConfigurationReferenceNamesEveryPartnerField(t *testing.T) {
	keys := docscheck.ReferenceKeys(reflect.TypeFor[Partner](), "yaml")
	if len(keys) < 50 {
		t.Fatalf("found only %d fields in Partner: the walk is broken", len(keys))
	}
	missing, err := docscheck.MissingFromSection("../docs/configuration.md", "Partner file fields", keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range missing {
		t.Errorf("partner-file field %s is missing from docs/configuration.md (section \"Partner file fields\"): add a row with its type, default and meaning", k)
	}
}
