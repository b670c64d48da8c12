//! A row's cells for the record readers both stores share
//! ([`agentmesh_store::cells`]), and [`record`], which runs one in a row
//! mapping of rusqlite.

use agentmesh_store::StoreResult;
use agentmesh_store::cells::Cells;
use rusqlite::Row;

/// The cells of one row.
pub(crate) struct SqliteCells<'a, 'r>(&'a Row<'r>);

impl Cells for SqliteCells<'_, '_> {
    fn text(&self, i: usize) -> StoreResult<String> {
        self.0.get(i).map_err(crate::classify)
    }
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        self.0.get(i).map_err(crate::classify)
    }
    fn int(&self, i: usize) -> StoreResult<i64> {
        self.0.get(i).map_err(crate::classify)
    }
}

/// A record read from `row` by one of the shared readers, as a row mapping of
/// rusqlite returns it: a value no record can hold is carried as the store's
/// own error (in a conversion failure), which `classify` gives back.
pub(crate) fn record<'a, 'r, T>(
    row: &'a Row<'r>,
    read: impl FnOnce(&SqliteCells<'a, 'r>) -> StoreResult<T>,
) -> rusqlite::Result<T> {
    read(&SqliteCells(row)).map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Null, Box::new(err))
    })
}
