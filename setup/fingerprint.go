package setup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Fingerprint identifies what of a Feldera table's definition Feldera
// compares when a program changes: a table whose fingerprint changed was
// started empty (bootstrapping), one whose fingerprint held kept its
// rows. Feldera counts a table modified when the names, types (nested
// ones and nullability included) or order of its columns changed, its
// primary key changed, or its materialized or append_only property was
// added or removed, and not when only its connectors changed
// (docs.feldera.com/docs/pipelines/modifying.md; the compiler's
// persistent id of the table, TableMetadata and InputColumnMetadata,
// also hashes column defaults). So that, and nothing else, is hashed.
func Fingerprint(rel feldera.Relation) string {
	type field struct {
		Name    string             `json:"n"`
		Type    feldera.ColumnType `json:"t"`
		Default *string            `json:"d,omitempty"`
	}
	fields := make([]field, len(rel.Fields))
	for i, f := range rel.Fields {
		fields[i] = field{f.CanonicalName(), f.ColumnType, f.Default}
	}
	return digest(struct {
		Version      int      `json:"v"`
		Fields       []field  `json:"f"`
		PrimaryKey   []string `json:"k"`
		Materialized bool     `json:"m"`
		AppendOnly   bool     `json:"a"`
	}{2, fields, rel.PrimaryKey, rel.Materialized || property(rel, "materialized"), property(rel, "append_only")})
}

// property reports whether rel sets the boolean WITH property name.
func property(rel feldera.Relation, name string) bool {
	return rel.Properties[name].Value == "true"
}

// fingerprintV1 is the fingerprint state files held before Fingerprint
// hashed only what Feldera compares: every field as decoded then, every
// WITH property (connectors included). A table recorded under it is
// taken to be unchanged when it still matches (Reconcile).
func fingerprintV1(rel feldera.Relation) string {
	type columnType struct {
		Type      string      `json:"type"`
		Nullable  bool        `json:"nullable"`
		Precision *int        `json:"precision,omitempty"`
		Scale     *int        `json:"scale,omitempty"`
		Component *columnType `json:"component,omitempty"`
	}
	var conv func(c *feldera.ColumnType) *columnType
	conv = func(c *feldera.ColumnType) *columnType {
		if c == nil {
			return nil
		}
		return &columnType{c.Type, c.Nullable, c.Precision, c.Scale, conv(c.Component)}
	}
	type field struct {
		Name          string     `json:"name"`
		CaseSensitive bool       `json:"case_sensitive"`
		ColumnType    columnType `json:"columntype"`
		Default       *string    `json:"default,omitempty"`
	}
	fields := make([]field, len(rel.Fields))
	for i, f := range rel.Fields {
		fields[i] = field{f.Name, f.CaseSensitive, *conv(&f.ColumnType), f.Default}
	}
	props := make([]string, 0, len(rel.Properties))
	for k, v := range rel.Properties {
		props = append(props, k+"="+v.Value)
	}
	sort.Strings(props)
	return digest(struct {
		Fields       []field
		PrimaryKey   []string
		Materialized bool
		Properties   []string
	}{fields, rel.PrimaryKey, rel.Materialized, props})
}

// SameDefinition reports whether recorded, a fingerprint a state file
// holds, names rel's definition as Feldera compares it, under the
// current hash or the one before it.
func SameDefinition(recorded string, rel feldera.Relation) bool {
	return recorded == Fingerprint(rel) || recorded == fingerprintV1(rel)
}

func digest(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}
