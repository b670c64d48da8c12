//! The backend-agnostic conformance suite, run against the PostgreSQL backend:
//! one `#[test]` per rule, each in a fresh schema. The racing rules share one
//! store between threads and open further stores on the same schema, as other
//! daemons would.

use std::sync::Arc;

use agentmesh_postgres::PgStore;
use agentmesh_store::Store;
use agentmesh_store::conformance::Racers;

use crate::support::{SchemaGuard, TestDb, fresh_schema, options};

/// A fresh schema and a store on it that threads share; [`Racers::open`] opens
/// further stores on the same schema.
struct RacingDb {
    shared: Arc<PgStore>,
    schema: String,
    // Dropped last, after every store opened on the schema.
    _guard: SchemaGuard,
}

impl RacingDb {
    fn new() -> RacingDb {
        let schema = fresh_schema();
        let guard = SchemaGuard(schema.clone());
        let shared = Arc::new(PgStore::open(&options(&schema)).expect("a fresh PostgreSQL store"));
        RacingDb { shared, schema, _guard: guard }
    }
}

impl Racers for RacingDb {
    fn shared(&self) -> Arc<dyn Store> {
        Arc::clone(&self.shared) as Arc<dyn Store>
    }

    fn open(&self) -> Arc<dyn Store> {
        Arc::new(PgStore::open(&options(&self.schema)).expect("another store on the same schema"))
    }
}

agentmesh_store::conformance_tests!(TestDb::new(), racing: RacingDb::new());

/// Copying meshes between two installations (`agentmesh_store::conformance::transfer`).
mod transfer {
    use agentmesh_store::conformance::transfer as rules;

    use crate::support::TestDb;

    #[test]
    fn transfer_pages_of_any_size_read_the_same_records() {
        rules::transfer_pages_of_any_size_read_the_same_records(&TestDb::new().store);
    }

    #[test]
    fn transfer_copy_round_trips_every_kind_and_is_idempotent() {
        rules::transfer_copy_round_trips_every_kind_and_is_idempotent(
            &TestDb::new().store,
            &TestDb::new().store,
        );
    }

    #[test]
    fn transfer_an_id_held_by_another_mesh_is_a_conflict() {
        rules::transfer_an_id_held_by_another_mesh_is_a_conflict(&TestDb::new().store, &TestDb::new().store);
    }

    #[test]
    fn transfer_a_record_of_another_mesh_is_refused() {
        rules::transfer_a_record_of_another_mesh_is_refused(&TestDb::new().store);
    }
}
