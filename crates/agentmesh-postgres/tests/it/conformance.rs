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
