package sqlddl

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Parse is felderatest.ParseDDL, whose comment lists the subset of
// Feldera's SQL it reads.
func Parse(ddl string) ([]feldera.Relation, error) {
	var rels []feldera.Relation
	for _, stmt := range splitTop(stripComments(ddl), ';') {
		stmt = strings.TrimSpace(stmt)
		if stmt == "" {
			continue
		}
		r, err := parseCreate(stmt)
		if err != nil {
			return nil, err
		}
		rels = append(rels, r)
	}
	return rels, nil
}

// reProperty is one 'key' = 'value' of a WITH clause (spaces removed).
var reProperty = regexp.MustCompile(`'([^']*)'='([^']*)'`)

func parseCreate(stmt string) (feldera.Relation, error) {
	var r feldera.Relation
	upper := strings.ToUpper(stmt)
	if !strings.HasPrefix(upper, "CREATE TABLE") {
		return r, fmt.Errorf("felderatest: only CREATE TABLE is supported: %q", stmt)
	}
	rest := strings.TrimSpace(stmt[len("CREATE TABLE"):])
	open := strings.IndexByte(rest, '(')
	closeIdx := matchParen(rest, open)
	if open < 0 || closeIdx < 0 {
		return r, fmt.Errorf("felderatest: no column list in %q", stmt)
	}
	r.Name, r.CaseSensitive = ident(strings.TrimSpace(rest[:open]))
	with := strings.ToLower(strings.Join(strings.Fields(rest[closeIdx+1:]), ""))
	r.Materialized = strings.Contains(with, "'materialized'='true'")
	for _, m := range reProperty.FindAllStringSubmatch(with, -1) {
		if r.Properties == nil {
			r.Properties = map[string]feldera.Property{}
		}
		r.Properties[m[1]] = feldera.Property{Value: m[2]}
	}
	for _, def := range splitTop(rest[open+1:closeIdx], ',') {
		def = strings.TrimSpace(def)
		u := strings.ToUpper(def)
		if strings.HasPrefix(u, "PRIMARY KEY") {
			o := strings.IndexByte(def, '(')
			c := matchParen(def, o)
			if o < 0 || c < 0 {
				return r, fmt.Errorf("felderatest: bad PRIMARY KEY clause %q", def)
			}
			for _, k := range splitTop(def[o+1:c], ',') {
				n, cs := ident(strings.TrimSpace(k))
				r.PrimaryKey = append(r.PrimaryKey, feldera.Canonical(n, cs))
			}
			continue
		}
		f, pk, err := parseColumn(def)
		if err != nil {
			return r, err
		}
		if pk {
			r.PrimaryKey = append(r.PrimaryKey, f.CanonicalName())
		}
		r.Fields = append(r.Fields, f)
	}
	for _, k := range r.PrimaryKey {
		found := false
		for i, f := range r.Fields {
			if f.CanonicalName() == k {
				r.Fields[i].ColumnType.Nullable = false
				found = true
			}
		}
		if !found {
			return r, fmt.Errorf("felderatest: primary key column %q not declared in %s", k, r.Name)
		}
	}
	return r, nil
}

func parseColumn(def string) (feldera.Field, bool, error) {
	var f feldera.Field
	var nameEnd int
	if strings.HasPrefix(def, `"`) {
		nameEnd = strings.Index(def[1:], `"`) + 2
	} else {
		nameEnd = strings.IndexAny(def, " \t\n")
	}
	if nameEnd <= 0 {
		return f, false, fmt.Errorf("felderatest: bad column %q", def)
	}
	f.Name, f.CaseSensitive = ident(def[:nameEnd])
	rest := strings.TrimSpace(def[nameEnd:])
	u := strings.ToUpper(rest)
	// Type runs up to the first constraint keyword.
	end := len(rest)
	for _, kw := range []string{" NOT NULL", " NULL", " PRIMARY KEY", " DEFAULT "} {
		if i := strings.Index(u, kw); i >= 0 && i < end {
			end = i
		}
	}
	ct, err := parseType(strings.TrimSpace(rest[:end]))
	if err != nil {
		return f, false, fmt.Errorf("felderatest: column %s: %w", f.Name, err)
	}
	ct.Nullable = !strings.Contains(u, "NOT NULL")
	pk := strings.Contains(u, "PRIMARY KEY")
	if i := strings.Index(u, " DEFAULT "); i >= 0 {
		d := strings.TrimSpace(rest[i+len(" DEFAULT "):])
		for _, kw := range []string{" NOT NULL", " PRIMARY KEY", " NULL"} {
			if j := strings.Index(strings.ToUpper(d), kw); j >= 0 {
				d = d[:j]
			}
		}
		f.Default = &d
	}
	f.ColumnType = ct
	return f, pk, nil
}

func parseType(t string) (feldera.ColumnType, error) {
	u := strings.ToUpper(strings.Join(strings.Fields(t), " "))
	if strings.HasSuffix(u, " ARRAY") || strings.HasSuffix(u, "[]") {
		inner := strings.TrimSuffix(strings.TrimSuffix(u, " ARRAY"), "[]")
		c, err := parseType(inner)
		if err != nil {
			return c, err
		}
		c.Nullable = true
		return feldera.ColumnType{Type: "ARRAY", Component: &c}, nil
	}
	var args []int
	if o := strings.IndexByte(u, '('); o >= 0 {
		c := strings.IndexByte(u, ')')
		for _, a := range strings.Split(u[o+1:c], ",") {
			n, err := strconv.Atoi(strings.TrimSpace(a))
			if err != nil {
				return feldera.ColumnType{}, fmt.Errorf("bad type arguments in %q", t)
			}
			args = append(args, n)
		}
		u = strings.TrimSpace(u[:o])
	}
	aliases := map[string]string{
		"INT": "INTEGER", "INT4": "INTEGER", "INT8": "BIGINT", "INT2": "SMALLINT", "BOOL": "BOOLEAN",
		"FLOAT": "DOUBLE", "DOUBLE PRECISION": "DOUBLE", "FLOAT8": "DOUBLE", "FLOAT4": "REAL",
		"NUMERIC": "DECIMAL", "DEC": "DECIMAL", "TEXT": "VARCHAR", "STRING": "VARCHAR",
		"CHARACTER VARYING": "VARCHAR", "CHARACTER": "CHAR", "BYTEA": "VARBINARY", "BYTES": "VARBINARY",
		"DATETIME": "TIMESTAMP", "TIMESTAMP WITH TIME ZONE": "TIMESTAMP_TZ", "TIMESTAMPTZ": "TIMESTAMP_TZ",
	}
	if a, ok := aliases[u]; ok {
		u = a
	}
	ct := feldera.ColumnType{Type: u}
	switch u {
	case "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "REAL", "DOUBLE", "DATE", "TIME",
		"TIMESTAMP", "TIMESTAMP_TZ", "UUID", "VARIANT", "BINARY", "VARBINARY":
	case "DECIMAL":
		p, s := 28, 0
		if len(args) > 0 {
			p = args[0]
		}
		if len(args) > 1 {
			s = args[1]
		}
		ct.Precision, ct.Scale = &p, &s
	case "VARCHAR", "CHAR":
		p := -1
		if len(args) > 0 {
			p = args[0]
		}
		ct.Precision = &p
	default:
		return ct, fmt.Errorf("unsupported type %q", t)
	}
	return ct, nil
}

func ident(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`), true
	}
	return strings.ToLower(s), false
}

func matchParen(s string, open int) int {
	if open < 0 {
		return -1
	}
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// splitTop splits on sep outside parentheses and quotes.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == sep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// stripComments removes -- line comments outside quoted text.
func stripComments(s string) string {
	var b strings.Builder
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if i < len(s) {
				b.WriteByte('\n')
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
