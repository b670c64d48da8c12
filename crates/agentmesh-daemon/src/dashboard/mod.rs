//! The dashboard: a web page served at `/`, on the same origin as the API and
//! behind the same token, and the live stream it listens to.
//!
//! `/` answers the page to a browser holding the session cookie, and the login
//! page to anyone else; the login page posts the token to `/login`, and
//! `/?token=` is exchanged once for the cookie and redirected to `/`, so the
//! token leaves the address bar. The cookie holds the token itself, `HttpOnly`,
//! `SameSite=Strict` and `Secure` on a TLS transport; the page never sees it. The
//! API accepts the cookie as well as the bearer header (`auth::require_token`
//! asks [`session_token`]); a request that changes something on the strength of
//! the cookie alone must also carry [`REQUEST_HEADER`], which a cross-site page
//! cannot send without a CORS preflight the daemon never grants, and an `Origin`,
//! when sent, must be the daemon's own ([`cookie_request_allowed`]).
//!
//! Every asset is embedded in the binary (`dashboard/` beside `src/`) and served
//! under `/assets/` with an `ETag` and `Cache-Control: no-cache`; every answer of
//! this module carries a Content-Security-Policy without inline script
//! ([`security_headers`]). The page reads only the public `/v1` API and the
//! stream of `stream`.

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::AppState;

pub(crate) mod stream;

/// The cookie that carries the token for the dashboard.
pub const SESSION_COOKIE: &str = "agentmesh_session";

/// The header a cookie-authenticated request that changes something must carry.
pub const REQUEST_HEADER: &str = "x-agentmesh-request";

/// The Content-Security-Policy of every dashboard answer: nothing from another
/// origin, no inline script, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// Whether the daemon serves over TLS (then the cookie is `Secure`). Added to
/// every request by `serve_with`; a router built alone serves plain HTTP.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Secure(pub bool);

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const INDEX: &[u8] = include_bytes!("../../dashboard/index.html");
const LOGIN: &str = include_str!("../../dashboard/login.html");

/// The files under `/assets/`.
const ASSETS: &[Asset] = &[
    Asset { name: "app.js", content_type: JS, body: include_bytes!("../../dashboard/app.js") },
    Asset { name: "api.js", content_type: JS, body: include_bytes!("../../dashboard/api.js") },
    Asset { name: "views.js", content_type: JS, body: include_bytes!("../../dashboard/views.js") },
    Asset { name: "words.js", content_type: JS, body: include_bytes!("../../dashboard/words.js") },
    Asset { name: "graph.js", content_type: JS, body: include_bytes!("../../dashboard/graph.js") },
    Asset { name: "dom.js", content_type: JS, body: include_bytes!("../../dashboard/dom.js") },
    Asset { name: "app.css", content_type: CSS, body: include_bytes!("../../dashboard/app.css") },
];

/// The page routes: `/`, `/login`, `/logout` and `/assets/{name}` (no token
/// needed for the assets: they hold code, never data).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/assets/{name}", get(asset))
}

/// The stream route, to nest under `/v1` behind the token check.
pub(crate) fn stream_route(shutdown: tokio_util::sync::CancellationToken) -> crate::route::Route {
    stream::route(shutdown)
}

/// The token the request's session cookie carries, if any.
pub(crate) fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
}

/// Whether a request authenticated by the cookie alone may proceed: a request
/// that only reads may; one that may change something needs [`REQUEST_HEADER`],
/// and an `Origin` header, when present, naming the host the request came to.
pub(crate) fn cookie_request_allowed(req: &Request) -> bool {
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    reads || (req.headers().contains_key(REQUEST_HEADER) && same_origin(req.headers()))
}

/// Whether the `Origin` header, when sent, names the `Host` the request came to.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin = origin.to_str().ok().and_then(|o| o.split_once("://")).map(|(_, rest)| rest);
    matches!((origin, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// What a refused cookie request is answered: 403 (`forbidden`), in the API's
/// error shape.
pub(crate) fn forbidden_cross_site() -> Response {
    crate::error::ApiError::CrossSite.into_response()
}

/// Whether the request wants a page rather than JSON (a browser's navigation).
pub(crate) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

/// Adds the dashboard's security headers to `response`.
pub(crate) fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// The login page, answered with `status`, with an optional notice.
pub(crate) fn login_page(status: StatusCode, notice: Option<&str>) -> Response {
    let notice = notice.map_or(String::new(), |n| format!("<p class=\"notice\" role=\"alert\">{n}</p>"));
    let html = LOGIN.replace("<!--notice-->", &notice);
    let response =
        (status, [(header::CONTENT_TYPE, HTML), (header::CACHE_CONTROL, "no-store")], html).into_response();
    security_headers(response)
}

/// Query of `/`.
#[derive(Debug, Default, Deserialize)]
struct IndexQuery {
    token: Option<String>,
}

/// Whether the request came over TLS (see [`Secure`]).
fn is_secure(req: &Request) -> bool {
    req.extensions().get::<Secure>().is_some_and(|Secure(s)| *s)
}

/// `GET /`: the page with the cookie; the cookie for a valid `?token=`; else the login page.
async fn index(State(state): State<AppState>, req: Request) -> Response {
    let query: IndexQuery = Query::try_from_uri(req.uri()).map(|Query(q)| q).unwrap_or_default();
    if let Some(token) = query.token {
        return if state.token.matches(token.trim()) {
            signed_in(&state, is_secure(&req))
        } else {
            login_page(StatusCode::UNAUTHORIZED, Some("That token was refused."))
        };
    }
    match session_token(req.headers()) {
        Some(token) if state.token.matches(token) => {
            let response =
                ([(header::CONTENT_TYPE, HTML), (header::CACHE_CONTROL, "no-cache")], INDEX).into_response();
            security_headers(response)
        }
        // Signing in is what `/` is for, without credentials: a page, not a refusal.
        _ => login_page(StatusCode::OK, None),
    }
}

/// A redirect to `/` that sets the session cookie.
fn signed_in(state: &AppState, secure: bool) -> Response {
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict{}",
        state.token.secret(),
        if secure { "; Secure" } else { "" }
    );
    redirect_home(&cookie)
}

/// 303 to `/`, setting `cookie`.
fn redirect_home(cookie: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(value) = HeaderValue::from_str(cookie) {
        headers.insert(header::SET_COOKIE, value);
    }
    security_headers(response)
}

/// The login form.
#[derive(Debug, Deserialize)]
struct LoginForm {
    token: String,
}

/// `POST /login` (a form with `token`): the cookie and a redirect to `/`, or the
/// login page again, 401.
async fn login(State(state): State<AppState>, req: Request) -> Response {
    if !same_origin(req.headers()) {
        return forbidden_cross_site();
    }
    let secure = is_secure(&req);
    match axum::Form::<LoginForm>::from_request(req, &()).await {
        Ok(axum::Form(form)) if state.token.matches(form.token.trim()) => signed_in(&state, secure),
        _ => login_page(StatusCode::UNAUTHORIZED, Some("That token was refused.")),
    }
}

/// `POST /logout`: forgets the cookie (from the page only, by the header rule).
async fn logout(req: Request) -> Response {
    if !cookie_request_allowed(&req) {
        return forbidden_cross_site();
    }
    redirect_home(&format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"))
}

/// `GET /assets/{name}`: an embedded file, with its `ETag`; 304 when the
/// browser's copy is current.
async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        let response =
            (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain")], "no such asset").into_response();
        return security_headers(response);
    };
    let etag = etag(asset.body);
    let current = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let mut response = if current {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut response = Body::from(asset.body).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
        response
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    security_headers(response)
}

/// A strong entity tag of `body`: its 64-bit FNV-1a hash, quoted.
fn etag(body: &[u8]) -> String {
    let hash = body
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    format!("\"{hash:016x}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; agentmesh_session=secret ; b=2"));
        assert_eq!(session_token(&headers), Some("secret"));
        headers.insert(header::COOKIE, HeaderValue::from_static("agentmesh_sessionx=nope"));
        assert_eq!(session_token(&headers), None);
    }

    #[test]
    fn an_origin_must_name_the_host() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert!(!same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&headers));
    }

    #[test]
    fn every_asset_has_a_distinct_tag() {
        let tags: std::collections::BTreeSet<String> = ASSETS.iter().map(|a| etag(a.body)).collect();
        assert_eq!(tags.len(), ASSETS.len());
    }
}
