// Package warm pins the project's dependencies in go.mod while the packages
// that use them are being written. Remove it once every one is imported.
package warm

import (
	_ "github.com/beevik/etree"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/russellhaering/goxmldsig"
	_ "github.com/smallstep/pkcs7"
	_ "github.com/spf13/viper"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/crypto/hkdf"
	_ "modernc.org/sqlite"
)
