//! Rows that are written both one to a statement and many to a statement,
//! with their columns listed once ([`row_and_columns!`]).
//!
//! Both forms bind the mesh as `$1` and then the row's columns in the order
//! they are declared: a one-row statement takes one value per column, a
//! many-row statement one array per column (read with `unnest`). So the two
//! statements of a table number their parameters alike.

/// Declares a row type and, beside it, the same columns gathered row by row
/// into one array each:
///
/// ```text
/// row_and_columns! {
///     /// One ledger entry's columns.
///     pub(crate) struct LedgerRow / LedgerColumns {
///         id: String,
///         kind: String,
///     }
/// }
/// ```
///
/// gives `LedgerRow { id, kind }` with `values(self, mesh_id)` (the mesh, then
/// each column's value) and `LedgerColumns` (`Default`) with `push(row)`,
/// `len()` and `arrays(self, mesh_id)` (the mesh, then each column's array).
/// The fields stay private to the module that declares them.
macro_rules! row_and_columns {
    (
        $(#[$meta:meta])*
        $vis:vis struct $row:ident / $columns:ident {
            $($field:ident: $ty:ty),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $row {
            $($field: $ty),+
        }

        impl $row {
            /// The parameters of the one-row statement: the mesh, then the
            /// row's columns.
            $vis fn values(self, mesh_id: &str) -> Vec<$crate::db::Owned> {
                vec![std::sync::Arc::new(mesh_id.to_owned()), $(std::sync::Arc::new(self.$field)),+]
            }
        }

        #[doc = concat!("Rows of one mesh as [`", stringify!($row), "`] declares them, gathered column by column, in the order they were pushed.")]
        #[derive(Default)]
        $vis struct $columns {
            $($field: Vec<$ty>),+
        }

        impl $columns {
            /// Adds a row after those pushed before it.
            $vis fn push(&mut self, row: $row) {
                $(self.$field.push(row.$field);)+
            }

            /// How many rows were pushed.
            $vis fn len(&self) -> usize {
                [$(self.$field.len()),+][0]
            }

            /// The parameters of the many-row statement: the mesh, then one
            /// array per column.
            $vis fn arrays(self, mesh_id: &str) -> Vec<$crate::db::Owned> {
                vec![std::sync::Arc::new(mesh_id.to_owned()), $(std::sync::Arc::new(self.$field)),+]
            }
        }
    };
}

pub(crate) use row_and_columns;
