//! `agentmesh migrate --from <data-dir or URL> --to <URL or data-dir>`: copies
//! every mesh from one installation to another, on either backend.
//!
//! The copy is the store's ([`agentmesh_store::transfer`]): each kind of record
//! of each mesh, page by page, inserting what the target lacks by key. So it is
//! lossless, records nothing in the ledger of its own, copies nothing new when
//! run again, and completes a copy that was interrupted. A mesh's archive (what
//! retention moved out of the hot database) is copied first, into the target's
//! hot tables, where the target's retention archives it again
//! ([`agentmesh_store::transfer::copy_archive`]). Progress goes to stderr
//! (a line per mesh and kind with records, and a line a second at most while a
//! kind is being copied); the counts go to stdout at the end.
//!
//! The two sides are named by `--from` and `--to` (a data dir, a `sqlite://`
//! file URL or a `postgres://` URL, with `--from-schema`/`--to-schema`, else
//! the global `--database-schema`, else `agentmesh`); the global store options
//! are not used. Everything is checked before a database is opened: a side that
//! is not a backend, a schema given to a SQLite side, the same database on both
//! sides, a source that holds no database. A target written by a newer
//! agentmesh is refused as it opens, unchanged.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentmesh_core::InvalidInput;
use agentmesh_postgres::{DEFAULT_SCHEMA, PgOptions};
use agentmesh_sqlite::DB_FILE_NAME;
use agentmesh_store::transfer::{
    ArchiveTally, KindTally, RecordKind, TransferConflict, TransferStore, copy_archive, copy_kind,
};
use anyhow::Context as _;
use serde::Serialize;

use super::StoreConfig;
use super::database::Opened;
use crate::cli::{GlobalArgs, MigrateArgs};
use crate::output::Output;

/// The shortest time between two progress lines of one kind being copied.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// One side of the copy, resolved.
struct Side {
    /// `from` or `to`: the field errors name.
    field: &'static str,
    config: StoreConfig,
}

impl Side {
    /// Resolves `--from`/`--to` (`value`) with its schema flag (`schema`, named
    /// `schema_field`), else the global `--database-schema`.
    fn resolve(
        field: &'static str,
        value: &str,
        schema_field: &'static str,
        schema: Option<&str>,
        global_schema: Option<&str>,
    ) -> anyhow::Result<Side> {
        let value = value.trim();
        if value.is_empty() {
            return Err(InvalidInput::new(field, "must not be blank").into());
        }
        if agentmesh_postgres::is_database_url(value) {
            let schema = schema.or(global_schema).unwrap_or(DEFAULT_SCHEMA);
            agentmesh_postgres::validate_schema(schema)
                .map_err(|e| InvalidInput::new(schema_field, e.problem))?;
            let config = StoreConfig::resolve(None, Some(value), Some(schema), || Ok(PathBuf::from(".")))
                .map_err(|e| retarget(e, field))?;
            return Ok(Side { field, config });
        }
        if schema.is_some() {
            return Err(InvalidInput::new(
                schema_field,
                format!("names a PostgreSQL schema, but --{field} names a SQLite database ({value})"),
            )
            .into());
        }
        let config = if value.contains("://") {
            StoreConfig::resolve(None, Some(value), None, || Ok(PathBuf::from(".")))
                .map_err(|e| retarget(e, field))?
        } else {
            let dir = Path::new(value);
            if dir.is_file() {
                return Err(InvalidInput::new(
                    field,
                    format!(
                        "{value} is a file: give the data dir that holds {DB_FILE_NAME}, or the file as \
                         sqlite://{value}"
                    ),
                )
                .into());
            }
            StoreConfig::data_dir(dir)
        };
        Ok(Side { field, config })
    }

    fn postgres(&self) -> Option<PgOptions> {
        self.config.postgres().map(|pg| PgOptions::new(pg.url.clone()).schema(pg.schema.clone()))
    }

    /// The SQLite file this side names.
    fn sqlite_file(&self) -> Option<PathBuf> {
        if self.config.postgres().is_some() {
            return None;
        }
        let file = match self.config.database_file() {
            Some(file) => file.to_owned(),
            None => self.config.dir().join(DB_FILE_NAME),
        };
        let absolute = std::path::absolute(&file).unwrap_or(file);
        Some(absolute.canonicalize().unwrap_or(absolute))
    }

    /// Whether a database is there to read, creating nothing.
    fn database_exists(&self) -> anyhow::Result<bool> {
        match self.postgres() {
            Some(options) => agentmesh_postgres::installation_exists(&options).with_context(|| {
                format!("failed to reach the database of --{} ({})", self.field, self.describe())
            }),
            None => Ok(self.config.database_exists()),
        }
    }

    fn describe(&self) -> String {
        self.config.describe()
    }

    fn open(&self) -> anyhow::Result<Opened> {
        self.config.open().with_context(|| format!("--{}", self.field))
    }
}

/// An [`InvalidInput`] of the database URL, renamed to the side's field.
fn retarget(err: anyhow::Error, field: &'static str) -> anyhow::Error {
    match err.downcast::<InvalidInput>() {
        Ok(invalid) if invalid.field == "databaseUrl" => InvalidInput::new(field, invalid.problem).into(),
        Ok(invalid) => invalid.into(),
        Err(err) => err,
    }
}

fn transfer(opened: &Opened) -> &dyn TransferStore {
    match opened {
        Opened::Sqlite(store) => store,
        Opened::Postgres(store) => store,
    }
}

/// What the copy did, printed as the `--json` document.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    from: String,
    to: String,
    meshes: Vec<MeshCopy>,
    totals: Totals,
}

/// One mesh: its kinds with records, by name.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MeshCopy {
    mesh_id: String,
    kinds: std::collections::BTreeMap<&'static str, KindTally>,
    /// The mesh's archive, when the source holds one.
    #[serde(skip_serializing_if = "Option::is_none")]
    archive: Option<ArchiveTally>,
}

/// Every mesh and kind together.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Totals {
    meshes: u64,
    read: u64,
    copied: u64,
    existing: u64,
    conflicts: u64,
}

impl Totals {
    fn add(&mut self, tally: &KindTally) {
        self.read += tally.read;
        self.copied += tally.copied;
        self.existing += tally.existing;
        self.conflicts += tally.conflicts.len() as u64;
    }
}

/// Runs `migrate`.
pub(crate) fn run(global: &GlobalArgs, args: MigrateArgs, out: &mut Output) -> anyhow::Result<()> {
    if global.server_on_command_line {
        return Err(InvalidInput::new(
            "server",
            "migrate copies between databases directly; run it without --server, where it can reach both",
        )
        .into());
    }
    let global_schema = global.database_schema.as_deref();
    let from = Side::resolve("from", &args.from, "fromSchema", args.from_schema.as_deref(), global_schema)?;
    let to = Side::resolve("to", &args.to, "toSchema", args.to_schema.as_deref(), global_schema)?;
    if global_schema.is_some() && from.postgres().is_none() && to.postgres().is_none() {
        return Err(InvalidInput::new(
            "databaseSchema",
            "names a PostgreSQL schema, but neither --from nor --to is a postgres:// URL",
        )
        .into());
    }
    let same = match (from.postgres(), to.postgres()) {
        (Some(a), Some(b)) => agentmesh_postgres::same_installation(&a, &b),
        (None, None) => from.sqlite_file() == to.sqlite_file(),
        _ => false,
    };
    if same {
        return Err(InvalidInput::new(
            "to",
            format!("names the database --from names ({}): copy to another one", from.describe()),
        )
        .into());
    }
    if !from.database_exists()? {
        return Err(
            InvalidInput::new("from", format!("holds no agentmesh database ({})", from.describe())).into()
        );
    }
    super::log_warnings();
    let source = from.open()?;
    let target = to.open()?;
    let (source, target) = (transfer(&source), transfer(&target));

    let mut stderr = io::stderr();
    let meshes = source
        .transfer_meshes()
        .with_context(|| format!("failed to list the meshes of {}", from.describe()))?;
    let _ =
        writeln!(stderr, "migrate: {} mesh(es) from {} to {}", meshes.len(), from.describe(), to.describe());
    let mut summary =
        Summary { from: from.describe(), to: to.describe(), meshes: Vec::new(), totals: Totals::default() };
    for (n, mesh_id) in meshes.iter().enumerate() {
        let mut copy = MeshCopy { mesh_id: mesh_id.clone(), kinds: Default::default(), archive: None };
        {
            // A block of its own: the progress line borrows stderr until the copy ends.
            let mut due = every(PROGRESS_EVERY);
            let mut progress = |tally: &ArchiveTally| {
                if due() {
                    let (tasks, entries) = (tally.tasks.read, tally.ledger.read);
                    let _ = writeln!(
                        stderr,
                        "  mesh {mesh_id}: archive: {tasks} task(s), {entries} entries read so far"
                    );
                }
            };
            let tally = copy_archive(source, target, mesh_id, args.page_size, &mut progress)
                .with_context(|| format!("failed to copy the archive of mesh {mesh_id}"))?;
            // A source without an archive reads nothing, and nothing is said of it.
            if tally.tasks.read + tally.ledger.read > 0 {
                let _ = writeln!(
                    io::stderr(),
                    "mesh {mesh_id} ({}/{}): archive: {} task(s) and {} ledger entries copied, {} already there; \
                     the target's retention archives them again",
                    n + 1,
                    meshes.len(),
                    tally.tasks.copied,
                    tally.ledger.copied,
                    tally.tasks.existing + tally.ledger.existing,
                );
                for t in [&tally.tasks, &tally.ledger] {
                    summary.totals.add(t);
                }
                copy.archive = Some(tally);
            }
        }
        for kind in RecordKind::ALL {
            let mut due = every(PROGRESS_EVERY);
            let mut progress = |tally: &KindTally| {
                if due() {
                    let _ = writeln!(
                        stderr,
                        "  mesh {mesh_id}: {kind}: {} read, {} copied so far",
                        tally.read, tally.copied
                    );
                }
            };
            let tally = copy_kind(source, target, mesh_id, kind, args.page_size, &mut progress)
                .with_context(|| format!("failed to copy the {kind} of mesh {mesh_id}"))?;
            if tally.read == 0 {
                continue;
            }
            let _ = writeln!(
                io::stderr(),
                "mesh {mesh_id} ({}/{}): {kind}: {} copied, {} already there{}",
                n + 1,
                meshes.len(),
                tally.copied,
                tally.existing,
                match tally.conflicts.len() {
                    0 => String::new(),
                    c => format!(", {c} conflicting"),
                }
            );
            summary.totals.add(&tally);
            copy.kinds.insert(kind.as_str(), tally);
        }
        summary.meshes.push(copy);
    }
    summary.totals.meshes = summary.meshes.len() as u64;
    out.emit(&summary, |w| write_summary(w, &summary))
}

/// A clock that says `true` at most once per `period`, the first time one
/// period after its making.
fn every(period: Duration) -> impl FnMut() -> bool {
    let mut last = Instant::now();
    move || {
        let due = last.elapsed() >= period;
        if due {
            last = Instant::now();
        }
        due
    }
}

fn write_summary(w: &mut dyn Write, s: &Summary) -> io::Result<()> {
    writeln!(w, "from {}", s.from)?;
    writeln!(w, "to   {}", s.to)?;
    if s.meshes.is_empty() {
        return writeln!(w, "no meshes: nothing to copy");
    }
    let mut table =
        crate::output::Table::new(vec!["MESH", "RECORDS", "COPIED", "ALREADY THERE", "CONFLICTS"]);
    let mut conflicts: Vec<(&str, &TransferConflict)> = Vec::new();
    for mesh in &s.meshes {
        let archive = mesh
            .archive
            .iter()
            .flat_map(|a| [("archived tasks", &a.tasks), ("archived ledger entries", &a.ledger)]);
        let kinds = RecordKind::ALL
            .into_iter()
            .filter_map(|kind| Some((kind.label(), mesh.kinds.get(kind.as_str())?)));
        for (label, t) in archive.chain(kinds) {
            table.row(vec![
                mesh.mesh_id.clone(),
                label.to_owned(),
                t.copied.to_string(),
                t.existing.to_string(),
                t.conflicts.len().to_string(),
            ]);
            conflicts.extend(t.conflicts.iter().map(|c| (mesh.mesh_id.as_str(), c)));
        }
    }
    table.write(w)?;
    let t = &s.totals;
    writeln!(
        w,
        "{} mesh(es): {} record(s) read, {} copied, {} already there, {} not copied (conflicts)",
        t.meshes, t.read, t.copied, t.existing, t.conflicts
    )?;
    for (mesh, c) in conflicts {
        writeln!(w, "conflict: mesh {mesh}: {} {}: {}", c.kind, c.id, c.reason)?;
    }
    Ok(())
}
