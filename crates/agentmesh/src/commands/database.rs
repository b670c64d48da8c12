//! The one place a store is opened: from a data dir, or from a database URL
//! (`--database-url` / `$AGENTMESH_DATABASE_URL`).
//!
//! This build's one backend is SQLite. A database URL is `sqlite://` followed by
//! the file's path (`sqlite:///srv/mesh/mesh-runtime.db` is absolute,
//! `sqlite://mesh.db` relative), or a bare path. A `postgres://` or
//! `postgresql://` URL is refused naming the flag: PostgreSQL is the next
//! backend, not this build's. Anything else is refused the same way.
//!
//! The data dir still holds what is not the database (the daemon's token, lock
//! and machine id, the original's legacy files). With only a database URL, the
//! data dir is the database file's directory. With both a URL and a data dir
//! (`--data-dir` or `$AGENTMESH_HOME`), they must name the same database, the
//! data dir's `mesh-runtime.db`; when they disagree, nothing is opened and the
//! error names both.

use std::path::{Path, PathBuf};

use agentmesh_core::InvalidInput;
use agentmesh_sqlite::{DB_FILE_NAME, LEGACY_DB_FILE_NAME, SqliteStore};
use anyhow::Context as _;

/// The field a refused database URL is named by.
const FIELD: &str = "databaseUrl";

/// Where the store lives: the data dir, and the database file when a URL named
/// one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    data_dir: PathBuf,
    database_file: Option<PathBuf>,
}

impl StoreConfig {
    /// The store of data dir `dir`: its `mesh-runtime.db` (or the legacy
    /// `beads.db`, renamed).
    pub fn data_dir(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig { data_dir: dir.into(), database_file: None }
    }

    /// Resolves the data dir and database URL given (see the module docs).
    /// `given_data_dir` is `--data-dir` or `$AGENTMESH_HOME`; `default_dir`
    /// supplies the data dir when neither it nor a URL is given.
    pub fn resolve(
        given_data_dir: Option<&Path>,
        database_url: Option<&str>,
        default_dir: impl FnOnce() -> anyhow::Result<PathBuf>,
    ) -> anyhow::Result<StoreConfig> {
        let Some(url) = database_url else {
            return Ok(StoreConfig::data_dir(match given_data_dir {
                Some(dir) => dir.to_owned(),
                None => default_dir()?,
            }));
        };
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
        Ok(StoreConfig { data_dir, database_file: Some(file) })
    }

    /// The data dir: the token, lock and machine id live there.
    pub fn dir(&self) -> &Path {
        &self.data_dir
    }

    /// The database file a URL named, if one did.
    pub fn database_file(&self) -> Option<&Path> {
        self.database_file.as_deref()
    }

    /// Whether a database is there to read: the URL's file, else the data dir's
    /// file under either name.
    pub fn database_exists(&self) -> bool {
        match &self.database_file {
            Some(file) => file.is_file(),
            None => {
                [DB_FILE_NAME, LEGACY_DB_FILE_NAME].into_iter().any(|name| self.data_dir.join(name).is_file())
            }
        }
    }

    /// What a user reads as the store's place in messages.
    pub fn describe(&self) -> String {
        match &self.database_file {
            Some(file) => file.display().to_string(),
            None => self.data_dir.display().to_string(),
        }
    }

    /// Opens (creating when missing) the store.
    pub fn open(&self) -> anyhow::Result<SqliteStore> {
        let opened = match &self.database_file {
            // A URL naming a data dir's own file opens it as that data dir, legacy
            // files included.
            Some(file) if file.file_name().is_some_and(|n| n == DB_FILE_NAME) => {
                SqliteStore::open_data_dir(&self.data_dir)
            }
            Some(file) => SqliteStore::open(file),
            None => SqliteStore::open_data_dir(&self.data_dir),
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
        "postgres" | "postgresql" => Err(InvalidInput::new(
            FIELD,
            "PostgreSQL is not supported by this build, which stores in SQLite only: give --database-url \
             sqlite:///path/to/mesh-runtime.db or a path, or --data-dir (PostgreSQL is the next backend)",
        )),
        other => Err(InvalidInput::new(
            FIELD,
            format!(
                "the scheme {other:?} is not a backend of this build, which stores in SQLite only: give \
                 --database-url sqlite:///path/to/mesh-runtime.db or a path"
            ),
        )),
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
    fn postgres_and_other_schemes_are_refused_naming_the_flag() {
        for url in ["postgres://u@h/db", "postgresql://h/db", "mysql://h/db"] {
            let err = sqlite_path(url).unwrap_err();
            assert_eq!(err.field, FIELD);
            assert!(err.problem.contains("--database-url") && err.problem.contains("SQLite"), "{err}");
        }
        assert!(
            sqlite_path("postgres://h/db").unwrap_err().problem.contains("PostgreSQL is the next backend")
        );
    }

    #[test]
    fn a_url_alone_puts_the_data_dir_beside_its_file() {
        let config = StoreConfig::resolve(None, Some("sqlite:///srv/m/other.db"), no_default).unwrap();
        assert_eq!(config.dir(), Path::new("/srv/m"));
        assert_eq!(config.describe(), "/srv/m/other.db");
        let config = StoreConfig::resolve(None, Some("other.db"), no_default).unwrap();
        assert_eq!(config.dir(), Path::new("."));
    }

    #[test]
    fn a_url_and_a_data_dir_must_agree() {
        let agreed = StoreConfig::resolve(
            Some(Path::new("/srv/m")),
            Some("sqlite:///srv/m/mesh-runtime.db"),
            no_default,
        )
        .unwrap();
        assert_eq!(agreed, StoreConfig::data_dir("/srv/m"));
        let err = StoreConfig::resolve(
            Some(Path::new("/srv/m")),
            Some("sqlite:///srv/n/mesh-runtime.db"),
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
        let given = StoreConfig::resolve(Some(Path::new("/d")), None, no_default).unwrap();
        assert_eq!(given, StoreConfig::data_dir("/d"));
        let default = StoreConfig::resolve(None, None, || Ok(PathBuf::from("/home/x/.agentmesh"))).unwrap();
        assert_eq!(default.dir(), Path::new("/home/x/.agentmesh"));
    }
}
