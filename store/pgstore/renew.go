package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/edigateway/gateway/dedup"
)

// renewQuery renews transport claims ($2, $3: keys and tokens) and ledger
// claims ($4, $5) still held by their tokens, in one statement, and counts
// the rows it renewed.
func renewQuery(schema string) string {
	t := pgx.Identifier{schema, "dedup_claims"}.Sanitize()
	l := pgx.Identifier{schema, "ledger_interchanges"}.Sanitize()
	return `WITH t AS (
	UPDATE ` + t + ` AS c SET lease_until = now() + $1::bigint * interval '1 microsecond'
	FROM unnest($2::text[], $3::text[]) AS h(key, token)
	WHERE c.key = h.key AND c.token = h.token AND c.state = 'claimed'
	RETURNING 1
), l AS (
	UPDATE ` + l + ` AS c SET lease_until = now() + $1::bigint * interval '1 microsecond'
	FROM unnest($4::text[], $5::text[]) AS h(key, token)
	WHERE c.key = h.key AND c.token = h.token AND c.state = 'claimed'
	RETURNING 1
)
SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM l)`
}

// RenewClaims implements dedup.Renewer with one statement (one round trip)
// for every claim of a delivery, transport keys and ledger interchanges.
func (s *Store) RenewClaims(ctx context.Context, claims []dedup.HeldClaim) error {
	tk, tt, lk, lt := []string{}, []string{}, []string{}, []string{}
	for _, c := range claims {
		if c.Interchange {
			lk, lt = append(lk, string(c.Key)), append(lt, string(c.Token))
		} else {
			tk, tt = append(tk, string(c.Key)), append(tt, string(c.Token))
		}
	}
	var renewed int64
	if err := execerFor(ctx, s.pool).QueryRow(ctx, s.renew, ceilUS(s.lease), tk, tt, lk, lt).Scan(&renewed); err != nil {
		return wrap("renew", err)
	}
	if lost := int64(len(claims)) - renewed; lost > 0 {
		return fmt.Errorf("pgstore: renew: %d of %d claims no longer held: %w", lost, len(claims), dedup.ErrStaleClaim)
	}
	return nil
}

var _ dedup.Renewer = (*Store)(nil)
