package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/edigateway/gateway/dedup"
)

// RenewClaims implements dedup.Renewer: one UPDATE per table (transport
// keys, ledger interchanges) compare-and-setting each (key, token) pair of a
// row still claimed, both in one request of the group commit.
func (s *Store) RenewClaims(ctx context.Context, claims []dedup.HeldClaim) error {
	var transport, ledger []dedup.HeldClaim
	for _, c := range claims {
		if c.Interchange {
			ledger = append(ledger, c)
		} else {
			transport = append(transport, c)
		}
	}
	leaseMS := ceilMS(s.lease)
	var renewed int64
	err := s.w.write(ctx, "renew", func(ctx context.Context, tx *sql.Tx) error {
		renewed = 0
		for _, part := range []struct {
			table  string
			claims []dedup.HeldClaim
		}{{"dedup_claims", transport}, {"ledger_interchanges", ledger}} {
			if len(part.claims) == 0 {
				continue
			}
			query, args := renewSQL(part.table, leaseMS, part.claims)
			res, err := s.w.exec(ctx, tx, query, args...)
			if err != nil {
				return wrap("renew", err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return wrap("renew", err)
			}
			renewed += n
		}
		return nil
	})
	if err != nil {
		return err
	}
	if lost := int64(len(claims)) - renewed; lost > 0 {
		return fmt.Errorf("sqlitestore: renew: %d of %d claims no longer held: %w", lost, len(claims), dedup.ErrStaleClaim)
	}
	return nil
}

// renewSQL is the renewal of claims in table: the lease from SQLite's clock
// for every row still claimed by one of the (key, token) pairs.
func renewSQL(table string, leaseMS int64, claims []dedup.HeldClaim) (string, []any) {
	var b strings.Builder
	b.WriteString(`UPDATE ` + table + ` SET lease_until = ` + nowMS + ` + ?1
WHERE state = 'claimed' AND (key, token) IN (VALUES `)
	args := []any{leaseMS}
	for i, c := range claims {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(?%d, ?%d)", len(args)+1, len(args)+2)
		args = append(args, string(c.Key), string(c.Token))
	}
	b.WriteString(")")
	return b.String(), args
}

var _ dedup.Renewer = (*Store)(nil)
