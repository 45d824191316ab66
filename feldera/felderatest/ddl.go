package felderatest

import (
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/sqlddl"
)

// ParseDDL reads a small subset of Feldera's SQL into relations:
//
//	CREATE TABLE name (col TYPE [NOT NULL] [PRIMARY KEY] [DEFAULT lit], ...,
//	  [PRIMARY KEY (a, b)]) [WITH ('materialized' = 'true')];
//
// Identifiers may be "quoted" (case-sensitive). Types: BOOLEAN, TINYINT,
// SMALLINT, INT/INTEGER, BIGINT, REAL, DOUBLE, DECIMAL(p,s)/NUMERIC, VARCHAR,
// CHAR, TEXT/STRING, BINARY/VARBINARY/BYTEA, DATE, TIME, TIMESTAMP,
// TIMESTAMP_TZ, UUID, VARIANT, and T ARRAY / T[]. Line comments (--) are
// ignored, as Feldera's SQL compiler ignores them.
func ParseDDL(ddl string) ([]feldera.Relation, error) {
	return sqlddl.Parse(ddl)
}

// MustParseDDL is ParseDDL that panics on error, for tests.
func MustParseDDL(ddl string) []feldera.Relation {
	rels, err := ParseDDL(ddl)
	if err != nil {
		panic(err)
	}
	return rels
}
