package pgvalue

import "strings"

// QuoteIdent quotes a Postgres identifier: always, so that any name
// (mixed case, a keyword, a quote inside) reads back as itself.
func QuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// QuoteLiteral quotes a Postgres string literal (standard_conforming_strings,
// on since 9.1: a backslash is an ordinary character).
func QuoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
