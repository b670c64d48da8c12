//! The unit tests' store on the server of `agentmesh_test_support`: each test
//! that needs one starts with `agentmesh_test_support::require_postgres!()`.

use agentmesh_test_support::postgres::Schema;

use crate::{PgOptions, PgStore};

/// A store in a fresh schema; the schema is dropped after the store.
pub(crate) struct FreshStore {
    pub(crate) store: PgStore,
    // Dropped after the store (fields drop in order), so its connections close first.
    _schema: Schema,
}

impl FreshStore {
    /// A store in a fresh schema on the server at `url`.
    pub(crate) fn new(url: &str) -> FreshStore {
        let schema = Schema::fresh(url, "am_test");
        let store =
            PgStore::open(&PgOptions::new(url).schema(schema.name())).expect("a fresh PostgreSQL store");
        FreshStore { store, _schema: schema }
    }
}

impl std::ops::Deref for FreshStore {
    type Target = PgStore;

    fn deref(&self) -> &PgStore {
        &self.store
    }
}
