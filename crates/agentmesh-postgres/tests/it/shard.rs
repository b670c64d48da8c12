//! Ready to shard by mesh: the schema keys every mesh table by `mesh_id` first,
//! and the statements the suite runs each name their mesh.

use agentmesh_core::NewTask;
use agentmesh_postgres::shard::UNSHARDED_TABLES;
use agentmesh_store::prelude::*;

use crate::support::{TestDb, assert_statements_shardable};

fn catalog(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("a connection to the test database")
}

#[test]
fn every_table_carries_mesh_id_first_in_its_primary_key_and_unique_indexes() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let mut client = catalog(&url);
    let schema = db.schema().to_owned();
    let tables: Vec<String> = client
        .query(
            "SELECT c.relname::TEXT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1",
            &[&schema],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tables.len() >= 15, "expected the whole schema, got {tables:?}");
    let mut checked = 0;
    for table in tables.iter().filter(|t| !UNSHARDED_TABLES.contains(&t.as_str())) {
        let mesh_column: Option<bool> = client
            .query_opt(
                "SELECT a.attnotnull FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = 'mesh_id'",
                &[&schema, table],
            )
            .unwrap()
            .map(|r| r.get(0));
        assert_eq!(mesh_column, Some(true), "{table} must have a NOT NULL mesh_id");
        // Every unique index (the primary key's included) starts with mesh_id.
        let indexes = client
            .query(
                "SELECT i.indexrelid::regclass::TEXT, i.indisprimary, a.attname::TEXT
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
                  WHERE n.nspname = $1 AND c.relname = $2 AND i.indisunique",
                &[&schema, table],
            )
            .unwrap();
        assert!(indexes.iter().any(|r| r.get::<_, bool>(1)), "{table} must have a primary key");
        for index in &indexes {
            let (name, first): (String, String) = (index.get(0), index.get(2));
            assert_eq!(first, "mesh_id", "unique index {name} of {table} must start with mesh_id");
        }
        checked += 1;
    }
    assert!(checked >= 14, "expected every mesh table checked, got {checked}");
    let foreign_keys: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
              WHERE n.nspname = $1 AND c.contype = 'f'",
            &[&schema],
        )
        .unwrap()
        .get(0);
    assert_eq!(foreign_keys, 0, "no table refers to another: nothing crosses a shard");
}

#[test]
fn the_statements_of_a_task_s_life_each_name_their_mesh() {
    let url = agentmesh_test_support::require_postgres!();
    let db = TestDb::new(&url);
    let now = agentmesh_core::Timestamp::from_millis(1_700_000_000_000);
    let new = NewTask { message: "work".into(), ..NewTask::default() };
    db.enqueue("mesh-a", &new, now).expect("enqueue");
    let claimant = agentmesh_core::Claimant {
        node_id: "node-1".into(),
        session_id: "session-1".into(),
        ..Default::default()
    };
    let claimed = db.claim_next("mesh-a", &claimant, &Default::default(), now).expect("claim");
    assert!(claimed.task().is_some(), "expected a claim");
    db.mesh_summaries().expect("summaries");
    assert!(
        !agentmesh_postgres::shard::prepared_statements().is_empty(),
        "expected the statements prepared to be recorded"
    );
    assert_statements_shardable();
}
