//! Rows a statement writes, with their columns listed once ([`statement_row!`]):
//! the statement binds the mesh as `$1`, then the row's columns in the order
//! they are declared.

/// Declares a row type whose `values(self, mesh_id)` are a one-row
/// statement's parameters (the mesh, then each column's value):
///
/// ```text
/// statement_row! {
///     /// One ledger entry's columns.
///     pub(crate) struct LedgerRow {
///         id: String,
///         kind: String,
///     }
/// }
/// ```
///
/// The fields stay private to the module that declares them.
macro_rules! statement_row {
    (
        $(#[$meta:meta])*
        $vis:vis struct $row:ident {
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
    };
}

pub(crate) use statement_row;
