//! The backend-agnostic conformance suite, run against the PostgreSQL backend:
//! one `#[test]` per rule, each in a fresh schema. The racing rules share one
//! store between threads and open further stores on the same schema, as other
//! daemons would.

use std::sync::Arc;

use agentmesh_postgres::PgStore;
use agentmesh_store::Store;
use agentmesh_store::conformance::Racers;
use agentmesh_test_support::postgres::Schema;
use agentmesh_test_support::require_postgres;

use crate::support::{TestDb, fresh_schema, options};

/// A fresh schema and a store on it that threads share; [`Racers::open`] opens
/// further stores on the same schema.
struct RacingDb {
    shared: Arc<PgStore>,
    url: String,
    // Dropped last, after every store opened on the schema.
    schema: Schema,
}

impl RacingDb {
    fn new(url: &str) -> RacingDb {
        let schema = fresh_schema(url);
        let shared = Arc::new(PgStore::open(&options(url, schema.name())).expect("a fresh PostgreSQL store"));
        RacingDb { shared, url: url.to_owned(), schema }
    }
}

impl Racers for RacingDb {
    fn shared(&self) -> Arc<dyn Store> {
        Arc::clone(&self.shared) as Arc<dyn Store>
    }

    fn open(&self) -> Arc<dyn Store> {
        Arc::new(
            PgStore::open(&options(&self.url, self.schema.name())).expect("another store on the same schema"),
        )
    }
}

// Each rule's test returns at once when there is no server (`require_postgres!`).
agentmesh_store::conformance_tests!(
    TestDb::new(&require_postgres!()),
    racing: RacingDb::new(&require_postgres!())
);

/// Copying meshes between two installations (`agentmesh_store::conformance::transfer`).
mod transfer {
    use agentmesh_test_support::require_postgres;

    use crate::support::TestDb;

    agentmesh_store::transfer_conformance_tests!(TestDb::new(&require_postgres!()));
}
