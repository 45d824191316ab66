package catalog

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode"
)

// A partition keeps its own replica identity: ALTER TABLE … REPLICA
// IDENTITY on a partitioned table does not cascade to the partitions it
// has. With publish_via_partition_root a change comes under the root's
// name, with the old tuple the partition's identity sent: a root that is
// FULL over leaves that are DEFAULT sends a key-changing or keyless UPDATE
// without the old row it would need. So the identity is checked leaf by
// leaf.

// LeafIdentity is what one leaf partition's replica identity sends.
type LeafIdentity struct {
	Name  string   // schema-qualified, quoted where needed
	Ident byte     // relreplident
	Cols  []string // the identity's columns (primary key or index); none for FULL and NOTHING
}

// leafIdentityQuery lists the leaves of a partitioned table with their
// replica identity and its columns.
const leafIdentityQuery = `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname), c.relreplident::text,
	COALESCE((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey::int2[])
		WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))), '{}')
FROM pg_partition_tree($1::regclass) pt JOIN pg_class c ON c.oid = pt.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE pt.isleaf ORDER BY 1`

func ReadLeafIdentities(ctx context.Context, conn *pgx.Conn, source string) ([]LeafIdentity, error) {
	rows, err := conn.Query(ctx, leafIdentityQuery, source)
	if err != nil {
		return nil, fmt.Errorf("read the replica identity of the partitions of %s: %w", source, err)
	}
	defer rows.Close()
	var out []LeafIdentity
	for rows.Next() {
		var l LeafIdentity
		var ident string
		if err := rows.Scan(&l.Name, &ident, &l.Cols); err != nil {
			return nil, err
		}
		l.Ident = ident[0]
		out = append(out, l)
	}
	return out, rows.Err()
}

// LeafRefusal says why a leaf's replica identity cannot feed rel, a
// partitioned table's decoding plan, or "" when it can: a keyless
// destination needs FULL; a keyed one needs FULL, or an identity that
// carries every Postgres column of its key.
func LeafRefusal(rel *decode.Rel, l LeafIdentity) string {
	if l.Ident == 'f' {
		return ""
	}
	if !rel.Keyed() {
		return fmt.Sprintf("partition %s is not REPLICA IDENTITY FULL, which keyless Feldera table %s needs to retract an old row (a partition keeps its own replica identity: ALTER TABLE %s REPLICA IDENTITY FULL)",
			l.Name, rel.Target.Dest.Name, l.Name)
	}
	var missing []string
	for _, i := range rel.KeyCols {
		if !slices.Contains(l.Cols, rel.Cols[i].Name) {
			missing = append(missing, rel.Cols[i].Name)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("the replica identity of partition %s (%s) does not carry %s, part of Feldera table %s's key: an UPDATE that changes it would leave the old row in Feldera (a partition keeps its own replica identity: ALTER TABLE %s REPLICA IDENTITY FULL)",
		l.Name, identityText(l), strings.Join(missing, ", "), rel.Target.Dest.Name, l.Name)
}

func identityText(l LeafIdentity) string {
	name := map[byte]string{'d': "DEFAULT", 'n': "NOTHING", 'i': "USING INDEX"}[l.Ident]
	if len(l.Cols) > 0 {
		name += ": " + strings.Join(l.Cols, ", ")
	}
	return name
}

// CheckLeaves refuses a partitioned source one of whose leaves cannot
// feed its plan, and returns the leaves' names.
func CheckLeaves(ctx context.Context, conn *pgx.Conn, rel *decode.Rel) ([]string, error) {
	leaves, err := ReadLeafIdentities(ctx, conn, rel.Target.Source())
	if err != nil {
		return nil, err
	}
	names := []string{} // not nil: a partitioned table with no partition yet
	for _, l := range leaves {
		if why := LeafRefusal(rel, l); why != "" {
			return nil, &decode.RefusalError{Table: rel.Target.Qualified(), Reason: why}
		}
		names = append(names, l.Name)
	}
	return names, nil
}
