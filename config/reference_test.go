package config

import (
	"reflect"
	"testing"

	"github.com/edigateway/gateway/internal/docscheck"
)

// TestConfigurationReferenceNamesEveryKey fails, naming the key, when a
// gateway.yaml key (a mapstructure field of Config, at any depth) is not
// written, in backquotes, in the "gateway.yaml keys" section of
// docs/configuration.md.
func TestConfigurationReferenceNamesEveryKey(t *testing.T) {
	keys := docscheck.ReferenceKeys(reflect.TypeFor[Config](), "mapstructure")
	if len(keys) < 100 {
		t.Fatalf("found only %d keys in Config: the walk is broken", len(keys))
	}
	missing, err := docscheck.MissingFromSection("../docs/configuration.md", "gateway.yaml keys", keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range missing {
		t.Errorf("gateway.yaml key %s is missing from docs/configuration.md (section \"gateway.yaml keys\"): add a row with its type, default and meaning", k)
	}
}
