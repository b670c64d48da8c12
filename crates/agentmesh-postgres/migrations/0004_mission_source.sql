-- The original's later mission column: where a mission came from, written once.
ALTER TABLE mesh_missions ADD COLUMN source TEXT;
