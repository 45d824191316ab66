package crashtest_test

// The crash matrix and the random histories run, with the progress
// table (-crashtest.progress), a keyless destination beside users and
// items: Postgres mirrors every change of users into events (id / 2,
// name), REPLICA IDENTITY FULL, by triggers in the same transaction, so
// events holds duplicate rows, its UPDATEs and DELETEs take one copy,
// and a TRUNCATE of users truncates it. Feldera's events has no PRIMARY
// KEY: a multiset, where a row sent twice is there twice, so every
// oracle comparison of it checks that nothing was sent again that
// Feldera held (issue 39: a keyless destination exact through the crash
// matrix and the random histories). An incremental snapshot refuses
// keyless tables, so worlds that read in chunks go without it.

// keylessDDL is the Feldera side of the mirror.
const keylessDDL = "CREATE TABLE events (k BIGINT, name VARCHAR) WITH ('materialized' = 'true');\n"

const mirrorSQL = `
CREATE TABLE events (k bigint, name text);
CREATE INDEX ON events (k);
ALTER TABLE events REPLICA IDENTITY FULL;
CREATE FUNCTION mirror_users() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    DELETE FROM events WHERE ctid = (SELECT ctid FROM events WHERE k = OLD.id / 2 AND name IS NOT DISTINCT FROM OLD.name LIMIT 1);
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO events VALUES (NEW.id / 2, NEW.name);
  END IF;
  RETURN NULL;
END $$;
CREATE FUNCTION mirror_users_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  TRUNCATE events;
  RETURN NULL;
END $$;
CREATE TRIGGER mirror AFTER INSERT OR UPDATE OR DELETE ON users FOR EACH ROW EXECUTE FUNCTION mirror_users();
CREATE TRIGGER mirror_truncate AFTER TRUNCATE ON users FOR EACH STATEMENT EXECUTE FUNCTION mirror_users_truncate();
INSERT INTO events SELECT id / 2, name FROM users;
ALTER PUBLICATION pub ADD TABLE events;`

// mirrorKeyless adds the keyless mirror to a world whose double
// declares the progress table and events (suiteDouble under
// -crashtest.progress, tableDouble), before pgfeldera first starts.
func (w *world) mirrorKeyless() {
	w.t.Helper()
	if !w.declared {
		return
	}
	w.exec(mirrorSQL)
	w.compared = append(w.compared, [2]string{"events", "events"})
	w.tables = "users,public.items:catalog_items,events" // keyless, accepted: the progress table keeps it exact
}
