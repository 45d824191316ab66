package setup

import (
	"encoding/json"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

const fingerprintDDL = "CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR, a INT ARRAY) WITH ('materialized' = 'true', 'append_only' = 'true', 'connectors' = '[]');"

// The fingerprint changes exactly when Feldera counts the table modified
// (modifying.md): names, types with their nested types and nullability,
// column order, the key, materialized and append_only; and not when only
// the connectors changed.
func TestFingerprint_WhatFelderaCompares(t *testing.T) {
	base := func() feldera.Relation { return felderatest.MustParseDDL(fingerprintDDL)[0] }
	mapOf := func(v string) feldera.ColumnType {
		return feldera.ColumnType{Type: "MAP", Key: &feldera.ColumnType{Type: "VARCHAR"}, Value: &feldera.ColumnType{Type: v, Nullable: true}}
	}
	withMap := func(v string) func(*feldera.Relation) {
		return func(r *feldera.Relation) { r.Fields[1].ColumnType = mapOf(v) }
	}
	withRow := func(typ string) func(*feldera.Relation) {
		return func(r *feldera.Relation) {
			r.Fields[1].ColumnType = feldera.ColumnType{Nullable: true, Fields: json.RawMessage(`[{"name":"x","type":"` + typ + `","nullable":true}]`)}
		}
	}
	for _, c := range []struct {
		name    string
		before  func(*feldera.Relation)
		after   func(*feldera.Relation)
		changed bool
	}{
		{"connectors only", nil, func(r *feldera.Relation) { r.Properties["connectors"] = feldera.Property{Value: `[{"transport":{}}]`} }, false},
		{"another property", nil, func(r *feldera.Relation) { r.Properties["expected_size"] = feldera.Property{Value: "1"} }, false},
		{"column renamed", nil, func(r *feldera.Relation) { r.Fields[1].Name = "w" }, true},
		{"column type", nil, func(r *feldera.Relation) { r.Fields[1].ColumnType.Type = "CHAR" }, true},
		{"nullability", nil, func(r *feldera.Relation) { r.Fields[1].ColumnType.Nullable = !r.Fields[1].ColumnType.Nullable }, true},
		{"array element type", nil, func(r *feldera.Relation) { r.Fields[2].ColumnType.Component.Type = "BIGINT" }, true},
		{"map value type", withMap("INTEGER"), withMap("BIGINT"), true},
		{"row field type", withRow("INTEGER"), withRow("BIGINT"), true},
		{"column order", nil, func(r *feldera.Relation) { r.Fields[1], r.Fields[2] = r.Fields[2], r.Fields[1] }, true},
		{"primary key", nil, func(r *feldera.Relation) { r.PrimaryKey = nil }, true},
		{"materialized", nil, func(r *feldera.Relation) { r.Materialized = false; delete(r.Properties, "materialized") }, true},
		{"append_only", nil, func(r *feldera.Relation) { delete(r.Properties, "append_only") }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := base(), base()
			if c.before != nil {
				c.before(&a)
				c.before(&b)
			}
			c.after(&b)
			if got := Fingerprint(a) != Fingerprint(b); got != c.changed {
				t.Fatalf("fingerprint changed: %v, want %v", got, c.changed)
			}
		})
	}
}

// A state file written before the fingerprint hashed only what Feldera
// compares still names the same definition: no table is read again
// after an upgrade.
func TestFingerprint_TheHashBeforeStillMatches(t *testing.T) {
	rel := felderatest.MustParseDDL(fingerprintDDL)[0]
	const v1 = "1229b1cfdc6e649e053c7e29" // what the hash before this one gave for it
	if got := fingerprintV1(rel); got != v1 {
		t.Fatalf("fingerprintV1 = %s, want %s (the value state files hold)", got, v1)
	}
	if !SameDefinition(v1, rel) || !SameDefinition(Fingerprint(rel), rel) {
		t.Fatal("a recorded fingerprint of the same definition is not recognised")
	}
	rel.Fields[1].ColumnType.Type = "CHAR"
	if SameDefinition(v1, rel) {
		t.Fatal("a changed definition matches the fingerprint recorded before it")
	}
}
