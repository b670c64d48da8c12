//! Ready to shard by mesh: every table but the installation's metadata keys its
//! rows by `mesh_id` first, and every statement names the one mesh it touches,
//! so `mesh_id` can be the distribution column of a sharded PostgreSQL (Citus)
//! and every statement is routed to one shard. The few statements whose purpose
//! is every mesh (the upkeep's sweeps, the list of meshes) say so with an
//! `/* all meshes */` comment; a sharded deployment runs them on every shard.
//!
//! [`shard_violation`] is the check; the statements a process prepared are kept
//! ([`prepared_statements`]), so tests check every statement they ran. The
//! tests also check the schema from the catalog: `mesh_id` first in every
//! primary key and unique index, and no foreign keys.
//!
//! A sharded deployment therefore distributes every mesh table by `mesh_id`,
//! co-located, makes the two metadata tables (`agentmesh_meta`,
//! `agentmesh_migrations`) reference tables, and needs no schema change. The
//! advisory locks are taken on the coordinator, where every transaction
//! starts. One caveat: ledger sequence numbers and transaction ids are handed
//! out per worker there, so a mesh's ledger order holds while its shard stays
//! on one worker; moving a shard needs a new database id (`agentmesh_meta`'s
//! `database_id`), so that followers start over.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// The marker of a statement meant for every mesh.
pub const ALL_MESHES: &str = "/* all meshes */";

/// Tables with no mesh: the installation's own metadata (reference tables
/// when sharded).
pub const UNSHARDED_TABLES: [&str; 2] = ["agentmesh_meta", "agentmesh_migrations"];

static PREPARED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Notes a statement text a connection prepared.
pub(crate) fn record(sql: &str) {
    let mut prepared = PREPARED.lock().unwrap_or_else(PoisonError::into_inner);
    if !prepared.contains(sql) {
        prepared.insert(sql.to_owned());
    }
}

/// Every statement text the stores of this process prepared so far.
pub fn prepared_statements() -> Vec<String> {
    PREPARED.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect()
}

/// Why `sql` would not be routed to one mesh's shard, if it would not: a
/// reference to a mesh table without a `mesh_id = ...` condition of its own (a
/// join or subquery that does not match the mesh, a statement with no mesh
/// bound). Statements marked [`ALL_MESHES`] pass.
pub fn shard_violation(sql: &str) -> Option<String> {
    if sql.contains(ALL_MESHES) {
        return None;
    }
    let text = normalize(sql);
    let tokens: Vec<&str> = text.split(' ').filter(|t| !t.is_empty()).collect();
    let mut tables = Vec::new();
    for pair in tokens.windows(2) {
        if matches!(pair[0], "from" | "join" | "into" | "update") {
            let table = pair[1].trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            if is_mesh_table(table) {
                tables.push(table.to_owned());
            }
        }
    }
    if tables.is_empty() {
        return None;
    }
    let mut conditions = text.matches("mesh_id = ").count();
    // An insert names the mesh in its column list (after an optional alias).
    for (i, pair) in tokens.windows(2).enumerate() {
        if pair[0] != "into" || !is_mesh_table(pair[1]) {
            continue;
        }
        let rest = &tokens[i + 2..];
        let Some(open) = rest.iter().take(3).position(|t| *t == "(") else { continue };
        let columns = rest[open + 1..].iter().take_while(|t| **t != ")");
        if columns.into_iter().any(|t| t.trim_end_matches(',') == "mesh_id") {
            conditions += 1;
        }
    }
    if conditions < tables.len() {
        return Some(format!(
            "{} reference(s) to mesh tables ({}) but {} mesh_id condition(s)",
            tables.len(),
            tables.join(", "),
            conditions
        ));
    }
    if !text.contains("mesh_id = $") && !text.contains("insert into") {
        return Some("no mesh_id is bound by a parameter".to_owned());
    }
    None
}

fn is_mesh_table(name: &str) -> bool {
    (name.starts_with("mesh_") || name == "remote_idle_sessions") && !UNSHARDED_TABLES.contains(&name)
}

/// Lower case, one space between words, spaces around parentheses and commas.
fn normalize(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    for c in sql.chars() {
        match c {
            '(' | ')' | ',' => {
                out.push(' ');
                out.push(c);
                out.push(' ');
            }
            c if c.is_whitespace() => out.push(' '),
            c => out.push(c.to_ascii_lowercase()),
        }
    }
    let mut collapsed = String::with_capacity(out.len());
    let mut space = false;
    for c in out.chars() {
        if c == ' ' {
            if !space {
                collapsed.push(' ');
            }
            space = true;
        } else {
            collapsed.push(c);
            space = false;
        }
    }
    // `mesh_id=$1` and `mesh_id = $1` read alike.
    collapsed.replace("mesh_id=", "mesh_id = ").replace(" ,", ",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_bound_to_one_mesh_pass() {
        for sql in [
            "SELECT payload FROM mesh_queue WHERE mesh_id = $1 AND id = $2",
            "INSERT INTO mesh_task_deps (mesh_id, task_id, depends_on_id) VALUES ($1, $2, $3)",
            "INSERT INTO mesh_coordinator_presence AS p (coordinator_key, mesh_id) VALUES ($1, $2)
             ON CONFLICT (mesh_id, coordinator_key) DO UPDATE SET last_seen_ms = EXCLUDED.last_seen_ms",
            "UPDATE mesh_queue SET hold = 0 WHERE mesh_id=$1 AND id = ANY($2)",
            "SELECT q.id FROM mesh_queue q JOIN mesh_task_deps d ON d.mesh_id = q.mesh_id AND d.task_id = q.id
              WHERE q.mesh_id = $1",
            "SELECT value FROM agentmesh_meta WHERE key = 'database_id'",
            "DELETE FROM mesh_tool_call_log /* all meshes */ WHERE called_at < $1",
        ] {
            assert_eq!(shard_violation(sql), None, "{sql}");
        }
    }

    #[test]
    fn statements_that_cross_meshes_are_named() {
        for sql in [
            "SELECT payload FROM mesh_queue WHERE id = $1",
            "SELECT q.id FROM mesh_queue q JOIN mesh_task_deps d ON d.task_id = q.id WHERE q.mesh_id = $1",
            "DELETE FROM mesh_pending_events WHERE queued_at < $1",
            "INSERT INTO mesh_queue AS q (id, payload) VALUES ($1, $2)",
            "SELECT COUNT(*) FROM mesh_queue WHERE mesh_id = mesh_id",
        ] {
            assert!(shard_violation(sql).is_some(), "{sql}");
        }
    }
}
