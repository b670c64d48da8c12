//! The bearer token of the HTTP API: its file, and the middleware that checks it.
//!
//! The token is created at the daemon's first start (32 random bytes as 64 hex
//! characters) in a file only its owner can read (mode 0600), by default
//! `<data-dir>/daemon.token`. Clients read the same file. Every `/v1` request must
//! carry `Authorization: Bearer <token>`, or the dashboard's session cookie (see
//! the `dashboard` module); anything else is answered 401 with a body that says
//! only that, whatever was wrong (a browser asking for a page gets the login page).

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use crate::error::ApiError;
use crate::{AppState, dashboard};

/// The token file's name in the data dir.
pub const TOKEN_FILE_NAME: &str = "daemon.token";

/// Random bytes in a generated token.
const TOKEN_BYTES: usize = 32;

/// The shortest token accepted from a file, in characters.
const MIN_TOKEN_CHARS: usize = 32;

/// The secret `/v1` requests must present. Its `Debug` form hides the secret.
#[derive(Clone)]
pub struct ApiToken(Arc<str>);

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

impl ApiToken {
    /// A token from its text: at least 32 visible ASCII characters, no spaces.
    pub fn new(secret: &str) -> io::Result<ApiToken> {
        if secret.len() < MIN_TOKEN_CHARS {
            return Err(invalid(format!("the token is shorter than {MIN_TOKEN_CHARS} characters")));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid("the token may hold only visible ASCII characters, no spaces"));
        }
        Ok(ApiToken(Arc::from(secret)))
    }

    /// A fresh random token from the operating system's generator.
    pub fn generate() -> io::Result<ApiToken> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes).map_err(|err| io::Error::other(format!("no random bytes: {err}")))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        ApiToken::new(&hex)
    }

    /// Reads the token from `path`, creating the file with a fresh token (mode
    /// 0600, parent directories too) when it does not exist.
    pub fn load_or_create(path: &Path) -> io::Result<ApiToken> {
        match ApiToken::load(path) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            loaded => return loaded,
        }
        let token = ApiToken::generate()?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        // Written whole under a private name (mode 0600 from the start), then linked
        // into place: the link fails when another process got there first, so
        // nobody ever reads a half-written token.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(TOKEN_FILE_NAME);
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|err| io::Error::other(format!("no random bytes: {err}")))?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let staged = path.with_file_name(format!(".{name}.{nonce}"));
        let mut file = create_private(&staged)?;
        let published = file
            .write_all(format!("{}\n", token.0).as_bytes())
            .and_then(|()| file.sync_all())
            .and_then(|()| fs::hard_link(&staged, path));
        let _ = fs::remove_file(&staged);
        match published {
            Ok(()) => Ok(token),
            // Another process created it first: use its token.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => ApiToken::load(path),
            Err(err) => Err(err),
        }
    }

    /// Reads the token from `path` (surrounding whitespace ignored). Warns when the
    /// file is readable by others than its owner.
    pub fn load(path: &Path) -> io::Result<ApiToken> {
        let text = fs::read_to_string(path)?;
        warn_if_shared(path);
        ApiToken::new(text.trim())
    }

    /// The secret, for a client that must send it.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is the token, in time independent of where they differ.
    pub(crate) fn matches(&self, presented: &str) -> bool {
        let expected = self.0.as_bytes();
        let presented = presented.as_bytes();
        expected.len() == presented.len()
            && expected.iter().zip(presented).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Creates `path` for writing, failing if it exists; only the owner may read it.
fn create_private(path: &Path) -> io::Result<fs::File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(unix)]
fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), "the token file is readable by other users; chmod 600 it");
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_path: &Path) {}

/// Middleware of the `/v1` routes: lets a request through only with the token.
pub(crate) async fn require_token(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if state.token.matches(token) => Ok(next.run(req).await),
        Some(_) => Err(ApiError::Unauthorized),
        // The dashboard's session cookie, within its cross-site rule.
        None => match dashboard::session_token(req.headers()) {
            Some(token) if state.token.matches(token) => {
                if dashboard::cookie_request_allowed(&req) {
                    Ok(next.run(req).await)
                } else {
                    Ok(dashboard::forbidden_cross_site())
                }
            }
            // A browser finds the login page, never data.
            _ if dashboard::wants_html(req.headers()) => {
                Ok(dashboard::login_page(axum::http::StatusCode::UNAUTHORIZED, None))
            }
            _ => Err(ApiError::Unauthorized),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_is_created_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join(TOKEN_FILE_NAME);
        let created = ApiToken::load_or_create(&path).unwrap();
        assert_eq!(created.secret().len(), 2 * TOKEN_BYTES);
        assert!(created.secret().bytes().all(|b| b.is_ascii_hexdigit()));
        let again = ApiToken::load_or_create(&path).unwrap();
        assert_eq!(created.secret(), again.secret());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn short_or_blank_tokens_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE_NAME);
        fs::write(&path, "  \n").unwrap();
        assert_eq!(ApiToken::load_or_create(&path).unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(ApiToken::new(&"x".repeat(31)).is_err());
        assert!(ApiToken::new(&format!("{} {}", "x".repeat(20), "y".repeat(20))).is_err());
    }

    #[test]
    fn tokens_match_only_exactly() {
        let token = ApiToken::new(&"a".repeat(64)).unwrap();
        assert!(token.matches(&"a".repeat(64)));
        assert!(!token.matches(&"a".repeat(63)));
        assert!(!token.matches(&format!("{}b", "a".repeat(63))));
        assert_eq!(format!("{token:?}"), "ApiToken(<redacted>)");
    }
}
