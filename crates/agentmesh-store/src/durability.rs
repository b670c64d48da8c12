//! How durable an acknowledged write is: the one setting that trades a flush
//! per commit for speed.

use std::fmt;
use std::str::FromStr;

/// What a write the store acknowledged survives.
///
/// The embedded store flushes its log before it answers by default, so every
/// acknowledged write survives a power loss or a kernel panic; concurrent
/// writers share that flush (group commit). [`Durability::ProcessCrashOnly`]
/// answers before the flush: an acknowledged write survives a crash of the
/// process, but a power loss may roll back the last ones. Even then no fencing
/// epoch or ledger sequence number is handed out twice (see the SQLite
/// backend's `durability` module). A PostgreSQL store follows its server's
/// `synchronous_commit`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Every acknowledged write is on stable storage: it survives a power loss.
    #[default]
    Full,
    /// An acknowledged write survives a crash of the process, not a power loss:
    /// the last writes before one may be rolled back.
    ProcessCrashOnly,
}

impl Durability {
    /// Every mode, the default first.
    pub const ALL: [Durability; 2] = [Durability::Full, Durability::ProcessCrashOnly];

    /// The mode's name, as `--durability` takes it and `status` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Full => "full",
            Durability::ProcessCrashOnly => "process-crash-only",
        }
    }

    /// What the mode promises, in one line.
    pub fn promise(self) -> &'static str {
        match self {
            Durability::Full => "every acknowledged write survives a power loss",
            Durability::ProcessCrashOnly => {
                "an acknowledged write survives a process crash, not a power loss (the last writes may be rolled back)"
            }
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A durability name that is not one of [`Durability::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDurability(pub String);

impl fmt::Display for UnknownDurability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown durability {:?}: expected full or process-crash-only", self.0)
    }
}

impl std::error::Error for UnknownDurability {}

impl FromStr for Durability {
    type Err = UnknownDurability;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Durability::ALL.into_iter().find(|d| d.as_str() == s).ok_or_else(|| UnknownDurability(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_unknown_ones_are_refused() {
        for mode in Durability::ALL {
            assert_eq!(mode.as_str().parse::<Durability>(), Ok(mode));
        }
        assert_eq!(Durability::default(), Durability::Full);
        let err = "normal".parse::<Durability>().unwrap_err();
        assert!(err.to_string().contains("full or process-crash-only"), "{err}");
    }
}
