//! The one place a store is opened: from a data dir, or from a database URL
//! (`--database-url` / `$AGENTMESH_DATABASE_URL`).
//!
//! Two backends. A `postgres://` or `postgresql://` URL opens the PostgreSQL
//! installation in the schema `--database-schema` (or
//! `$AGENTMESH_DATABASE_SCHEMA`, default `agentmesh`), creating and migrating
//! it as needed. Any other URL names an embedded SQLite file: `sqlite://`
//! followed by the file's path (`sqlite:///srv/mesh/mesh-runtime.db` is
//! absolute, `sqlite://mesh.db` relative), or a bare path. Other schemes are
//! refused naming the flag.
//!
//! The data dir still holds what is not the database (the daemon's token, lock
//! and machine id, the original's legacy files). With only a SQLite URL, the
//! data dir is the database file's directory; with a PostgreSQL URL it is
//! `--data-dir` (or `$AGENTMESH_HOME`, else `~/.agentmesh`). With both a SQLite
//! URL and a data dir, they must name the same database, the data dir's
//! `mesh-runtime.db`; when they disagree, nothing is opened and the error names
//! both.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentmesh_core::InvalidInput;
use agentmesh_postgres::{PgOptions, PgStore};
use agentmesh_sqlite::{DB_FILE_NAME, Durability, LEGACY_DB_FILE_NAME, OpenOptions, SqliteStore};
use agentmesh_store::Store;
use anyhow::Context as _;

/// The field a refused database URL is named by.
const FIELD: &str = "databaseUrl";

/// Where the store lives: the data dir, and the database file or PostgreSQL
/// installation when a URL named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreConfig {
    data_dir: PathBuf,
    database_file: Option<PathBuf>,
    postgres: Option<PostgresTarget>,
    /// The budget of one request (`--request-timeout`): a PostgreSQL store's
    /// lock timeout follows it.
    request_timeout: Duration,
    /// What an acknowledged write of the embedded file survives (`--durability`).
    durability: Durability,
}

/// A PostgreSQL installation: the server's URL and the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PostgresTarget {
    /// The connection URL as given.
    pub url: String,
    /// The schema holding the installation.
    pub schema: String,
}

/// An opened store, by backend. (Opened once per process and moved into an
/// `Arc` at once, so the variants' sizes do not matter.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Opened {
    /// The embedded file.
    Sqlite(SqliteStore),
    /// A PostgreSQL installation.
    Postgres(PgStore),
}

impl Opened {
    /// The store, for the API and the daemon.
    pub(crate) fn into_store(self) -> Arc<dyn Store> {
        match self {
            Opened::Sqlite(store) => Arc::new(store),
            Opened::Postgres(store) => Arc::new(store),
        }
    }
}

impl StoreConfig {
    /// The store of data dir `dir`: its `mesh-runtime.db` (or the legacy
    /// `beads.db`, renamed).
    pub(crate) fn data_dir(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            data_dir: dir.into(),
            database_file: None,
            postgres: None,
            request_timeout: agentmesh_api::DEFAULT_REQUEST_TIMEOUT,
            durability: Durability::Full,
        }
    }

    /// Resolves the data dir and database URL given (see the module docs).
    /// `given_data_dir` is `--data-dir` or `$AGENTMESH_HOME`; `default_dir`
    /// supplies the data dir when neither it nor a URL is given.
    pub(crate) fn resolve(
        given_data_dir: Option<&Path>,
        database_url: Option<&str>,
        database_schema: Option<&str>,
        default_dir: impl FnOnce() -> anyhow::Result<PathBuf>,
    ) -> anyhow::Result<StoreConfig> {
        let Some(url) = database_url else {
            if database_schema.is_some() {
                return Err(InvalidInput::new(
                    "databaseSchema",
                    "names a PostgreSQL schema, but no PostgreSQL --database-url (or $AGENTMESH_DATABASE_URL) \
                     is given",
                )
                .into());
            }
            return Ok(StoreConfig::data_dir(match given_data_dir {
                Some(dir) => dir.to_owned(),
                None => default_dir()?,
            }));
        };
        if agentmesh_postgres::is_database_url(url.trim()) {
            let data_dir = match given_data_dir {
                Some(dir) => dir.to_owned(),
                None => default_dir()?,
            };
            let schema = database_schema.unwrap_or(agentmesh_postgres::DEFAULT_SCHEMA).to_owned();
            agentmesh_postgres::validate_schema(&schema)?;
            let postgres = PostgresTarget { url: url.trim().to_owned(), schema };
            return Ok(StoreConfig {
                data_dir,
                database_file: None,
                postgres: Some(postgres),
                request_timeout: agentmesh_api::DEFAULT_REQUEST_TIMEOUT,
                durability: Durability::Full,
            });
        }
        if database_schema.is_some() {
            return Err(InvalidInput::new(
                "databaseSchema",
                "names a PostgreSQL schema, but --database-url (or $AGENTMESH_DATABASE_URL) names a SQLite file",
            )
            .into());
        }
        let file = sqlite_path(url)?;
        let parent = file.parent().map(Path::to_owned).unwrap_or_default();
        let data_dir = if parent.as_os_str().is_empty() { PathBuf::from(".") } else { parent };
        if let Some(dir) = given_data_dir {
            let theirs = absolute(&dir.join(DB_FILE_NAME));
            if absolute(&file) != theirs {
                return Err(InvalidInput::new(
                    FIELD,
                    format!(
                        "--database-url (or $AGENTMESH_DATABASE_URL) names {} but --data-dir (or \
                         $AGENTMESH_HOME) names {}: give one of them, or make the URL name the data \
                         dir's {DB_FILE_NAME}",
                        file.display(),
                        theirs.display()
                    ),
                )
                .into());
            }
            return Ok(StoreConfig::data_dir(dir));
        }
        Ok(StoreConfig {
            data_dir,
            database_file: Some(file),
            postgres: None,
            request_timeout: agentmesh_api::DEFAULT_REQUEST_TIMEOUT,
            durability: Durability::Full,
        })
    }

    /// The clock commands read the time from: the database's for PostgreSQL
    /// (shared by every daemon on it), else this machine's.
    pub(crate) fn clock(&self) -> agentmesh_api::Clock {
        match self.postgres {
            Some(_) => agentmesh_postgres::database_now,
            None => crate::now,
        }
    }

    /// The PostgreSQL installation a URL named, if one did.
    pub(crate) fn postgres(&self) -> Option<&PostgresTarget> {
        self.postgres.as_ref()
    }

    /// The same, with requests of `timeout` (see [`StoreConfig::request_timeout`]).
    pub(crate) fn with_request_timeout(mut self, timeout: Duration) -> StoreConfig {
        self.request_timeout = timeout;
        self
    }

    /// The same, with the embedded file opened in `durability` (a PostgreSQL
    /// store follows its server's `synchronous_commit`).
    pub(crate) fn with_durability(mut self, durability: Durability) -> StoreConfig {
        self.durability = durability;
        self
    }

    /// The budget of one request: how long a store call may take, across
    /// every attempt, before it is answered with what held it up.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The data dir: the token, lock and machine id live there.
    pub(crate) fn dir(&self) -> &Path {
        &self.data_dir
    }

    /// The database file a URL named, if one did.
    pub(crate) fn database_file(&self) -> Option<&Path> {
        self.database_file.as_deref()
    }

    /// Whether a database is there to read: the URL's file, else the data dir's
    /// file under either name.
    /// A PostgreSQL installation counts as there: opening it creates its schema
    /// when missing, and a server that cannot be reached fails the command.
    pub(crate) fn database_exists(&self) -> bool {
        if self.postgres.is_some() {
            return true;
        }
        match &self.database_file {
            Some(file) => file.is_file(),
            None => {
                [DB_FILE_NAME, LEGACY_DB_FILE_NAME].into_iter().any(|name| self.data_dir.join(name).is_file())
            }
        }
    }

    /// What a user reads as the store's place in messages.
    pub(crate) fn describe(&self) -> String {
        if let Some(pg) = &self.postgres {
            return format!("{} (schema {})", redact(&pg.url), pg.schema);
        }
        match &self.database_file {
            Some(file) => file.display().to_string(),
            None => self.data_dir.display().to_string(),
        }
    }

    /// Opens (creating when missing) the store, on either backend.
    pub(crate) fn open(&self) -> anyhow::Result<Opened> {
        match &self.postgres {
            Some(pg) => {
                let options = PgOptions::new(pg.url.clone())
                    .schema(pg.schema.clone())
                    .request_timeout(self.request_timeout);
                let store = PgStore::open(&options)
                    .with_context(|| format!("failed to open the database {}", self.describe()))?;
                // Time is read from the database's clock from here on.
                store
                    .sync_clock()
                    .with_context(|| format!("failed to read the clock of {}", self.describe()))?;
                Ok(Opened::Postgres(store))
            }
            None => self.open_sqlite().map(Opened::Sqlite),
        }
    }

    /// Opens (creating when missing) the embedded file, for what only it has
    /// (importing the original's files); a PostgreSQL URL is refused, naming
    /// what to do instead.
    pub(crate) fn open_sqlite(&self) -> anyhow::Result<SqliteStore> {
        if self.postgres.is_some() {
            return Err(InvalidInput::new(
                FIELD,
                "names a PostgreSQL database, but this command works on the embedded SQLite file: run it \
                 with --data-dir, then copy the meshes with `agentmesh migrate --from <data-dir> --to <url>`",
            )
            .into());
        }
        let options = OpenOptions::with_durability(self.durability);
        let opened = match &self.database_file {
            // A URL naming a data dir's own file opens it as that data dir, legacy
            // files included.
            Some(file) if file.file_name().is_some_and(|n| n == DB_FILE_NAME) => {
                SqliteStore::open_data_dir_with(&self.data_dir, &options)
            }
            Some(file) => SqliteStore::open_with(file, &options),
            None => SqliteStore::open_data_dir_with(&self.data_dir, &options),
        };
        opened.with_context(|| format!("failed to open the database in {}", self.describe()))
    }
}

/// The SQLite file a database URL names.
fn sqlite_path(url: &str) -> Result<PathBuf, InvalidInput> {
    let url = url.trim();
    if url.is_empty() {
        return Err(InvalidInput::new(FIELD, "must not be blank"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(PathBuf::from(url));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "sqlite" if rest.is_empty() => Err(InvalidInput::new(
            FIELD,
            "names no file: give sqlite:///path/to/mesh-runtime.db (three slashes for an absolute path)",
        )),
        "sqlite" => Ok(PathBuf::from(rest)),
        other => Err(InvalidInput::new(
            FIELD,
            format!(
                "the scheme {other:?} is not a backend: give --database-url \
                 postgres://user@host:5432/database, sqlite:///path/to/mesh-runtime.db or a path"
            ),
        )),
    }
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// `path` made absolute against the working directory, for comparing paths
/// that may not exist yet.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_default() -> anyhow::Result<PathBuf> {
        panic!("the default data dir is not asked for")
    }

    #[test]
    fn sqlite_urls_and_paths_name_a_file() {
        assert_eq!(
            sqlite_path("sqlite:///srv/m/mesh-runtime.db").unwrap(),
            Path::new("/srv/m/mesh-runtime.db")
        );
        assert_eq!(sqlite_path("SQLITE://rel/x.db").unwrap(), Path::new("rel/x.db"));
        assert_eq!(sqlite_path(" /srv/m/x.db ").unwrap(), Path::new("/srv/m/x.db"));
        for bad in ["", "  ", "sqlite://"] {
            assert_eq!(sqlite_path(bad).unwrap_err().field, FIELD, "{bad:?}");
        }
    }

    #[test]
    fn other_schemes_are_refused_naming_the_flag() {
        for url in ["mysql://h/db", "redis://h"] {
            let err = sqlite_path(url).unwrap_err();
            assert_eq!(err.field, FIELD);
            assert!(err.problem.contains("postgres://") && err.problem.contains("sqlite://"), "{err}");
        }
    }

    #[test]
    fn a_postgres_url_names_an_installation_and_keeps_the_data_dir() {
        let config = StoreConfig::resolve(
            Some(Path::new("/d")),
            Some("postgres://u:secret@db.example:5433/mesh"),
            None,
            no_default,
        )
        .unwrap();
        assert_eq!(config.dir(), Path::new("/d"));
        let pg = config.postgres().expect("a PostgreSQL target");
        assert_eq!(pg.schema, agentmesh_postgres::DEFAULT_SCHEMA);
        assert_eq!(config.describe(), "postgres://u@db.example:5433/mesh (schema agentmesh)");
        let config = StoreConfig::resolve(None, Some("postgresql://h/db"), Some("team_a"), || {
            Ok(PathBuf::from("/home/x/.agentmesh"))
        })
        .unwrap();
        assert_eq!(config.postgres().unwrap().schema, "team_a");
        assert_eq!(config.dir(), Path::new("/home/x/.agentmesh"));
    }

    #[test]
    fn a_schema_needs_a_postgres_url_and_a_valid_name() {
        for (url, schema) in
            [(None, "s"), (Some("sqlite:///srv/x.db"), "s"), (Some("postgres://h/db"), "1bad")]
        {
            let err = StoreConfig::resolve(Some(Path::new("/d")), url, Some(schema), no_default).unwrap_err();
            let invalid = err.downcast_ref::<InvalidInput>().expect("invalid input");
            assert_eq!(invalid.field, "databaseSchema", "{url:?} {schema}");
        }
    }

    #[test]
    fn a_url_alone_puts_the_data_dir_beside_its_file() {
        let config = StoreConfig::resolve(None, Some("sqlite:///srv/m/other.db"), None, no_default).unwrap();
        assert_eq!(config.dir(), Path::new("/srv/m"));
        assert_eq!(config.describe(), "/srv/m/other.db");
        let config = StoreConfig::resolve(None, Some("other.db"), None, no_default).unwrap();
        assert_eq!(config.dir(), Path::new("."));
    }

    #[test]
    fn a_url_and_a_data_dir_must_agree() {
        let agreed = StoreConfig::resolve(
            Some(Path::new("/srv/m")),
            Some("sqlite:///srv/m/mesh-runtime.db"),
            None,
            no_default,
        )
        .unwrap();
        assert_eq!(agreed, StoreConfig::data_dir("/srv/m"));
        let err = StoreConfig::resolve(
            Some(Path::new("/srv/m")),
            Some("sqlite:///srv/n/mesh-runtime.db"),
            None,
            no_default,
        )
        .unwrap_err();
        let invalid = err.downcast_ref::<InvalidInput>().expect("invalid input");
        assert_eq!(invalid.field, FIELD);
        assert!(
            invalid.problem.contains("/srv/n/mesh-runtime.db") && invalid.problem.contains("/srv/m"),
            "{invalid}"
        );
    }

    #[test]
    fn without_a_url_the_data_dir_or_the_default_is_used() {
        let given = StoreConfig::resolve(Some(Path::new("/d")), None, None, no_default).unwrap();
        assert_eq!(given, StoreConfig::data_dir("/d"));
        let default =
            StoreConfig::resolve(None, None, None, || Ok(PathBuf::from("/home/x/.agentmesh"))).unwrap();
        assert_eq!(default.dir(), Path::new("/home/x/.agentmesh"));
    }
}
