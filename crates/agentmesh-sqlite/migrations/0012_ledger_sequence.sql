-- The ledger sequence: every entry gets a number from one counter per database,
-- taken in the transaction that appends it, so numbers increase in commit order
-- (an entry committed late or imported with an old timestamp still gets a number
-- past every entry committed before it), and a deleted entry's number is never
-- handed out again (which the rowid does not promise). `origin` names the
-- database that numbered the entry: an id made when this step ran, kept in
-- `mesh_meta` beside the counter. The Rust step after this one makes the id,
-- numbers the entries already here in (timestamp, rowid) order, and builds the
-- index slice pages by sequence read.
CREATE TABLE mesh_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
ALTER TABLE mesh_event_ledger ADD COLUMN seq INTEGER;
ALTER TABLE mesh_event_ledger ADD COLUMN origin TEXT;
