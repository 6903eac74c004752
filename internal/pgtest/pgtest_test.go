package pgtest

import "testing"

func TestWithPoolMaxConns(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u@h/db", "postgres://u@h/db?pool_max_conns=4"},
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?sslmode=disable&pool_max_conns=4"},
		{"host=h dbname=db", "host=h dbname=db pool_max_conns=4"},
		{"postgres://u@h/db?pool_max_conns=9", "postgres://u@h/db?pool_max_conns=9"},
	} {
		if got := WithPoolMaxConns(c.in, 4); got != c.want {
			t.Errorf("WithPoolMaxConns(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestWithoutPoolMaxConns(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u@h/db?sslmode=disable&pool_max_conns=32", "postgres://u@h/db?sslmode=disable"},
		{"postgres://u@h/db?pool_max_conns=32", "postgres://u@h/db"},
		{"host=h pool_max_conns=32 dbname=db", "host=h dbname=db"},
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?sslmode=disable"},
	} {
		if got := withoutPoolMaxConns(c.in); got != c.want {
			t.Errorf("withoutPoolMaxConns(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
