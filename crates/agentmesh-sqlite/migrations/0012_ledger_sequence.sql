-- The ledger sequence: every entry gets a number, taken in the transaction that
-- appends it, one past its mesh's highest, so numbers increase in commit order
-- (an entry committed late or imported with an old timestamp still gets a number
-- past every entry of its mesh committed before it). A deletion keeps the
-- mesh's highest number in `mesh_meta`, so a deleted entry's number is never
-- handed out again (which the rowid does not promise). `mesh_meta` also keeps the
-- database's id, made when this step runs: the origin a page by sequence names.
-- The Rust step after this one makes the id, numbers the entries already here
-- per mesh in (timestamp, rowid) order, and builds the index numbering and
-- paging by sequence read.
CREATE TABLE mesh_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
ALTER TABLE mesh_event_ledger ADD COLUMN seq INTEGER;
