//! [`Route`]: one route of the HTTP surface, the single source of both the
//! router and the OpenAPI document.
//!
//! A route names its method, path and handler, and says what the document tells
//! of it: a summary, the type of its JSON body and of its query, the type and
//! status of its answer, and the error statuses it can answer beyond the ones
//! every route of its kind can. [`router`] mounts a list of them (the ones that
//! need the bearer token behind it); `openapi::document` describes the same
//! list, so a route cannot be served without being described.

use axum::handler::Handler;
use axum::http::{Method, StatusCode};
use axum::routing::{MethodFilter, MethodRouter};
use axum::{Router, middleware};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use crate::{AppState, auth};

/// Makes the schema of one type in a generator (a `$ref` to its definition for
/// a named type).
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// What a route answers on success.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// A JSON document of this schema.
    Json(SchemaFn),
    /// Text of this media type, described in words.
    Text {
        /// The media type (`text/event-stream`, ...).
        media_type: &'static str,
        /// What the text is.
        description: &'static str,
    },
}

/// One route: how it is served and how it is described.
pub(crate) struct Route {
    /// The method it takes.
    pub(crate) method: Method,
    /// The path template, in axum's `{name}` syntax (which is OpenAPI's too).
    pub(crate) path: &'static str,
    /// What serves it.
    pub(crate) handler: MethodRouter<AppState>,
    /// The handler's name: the operation id.
    pub(crate) operation_id: &'static str,
    /// One line on what it does.
    pub(crate) summary: &'static str,
    /// Served without the bearer token.
    pub(crate) open: bool,
    /// The schema of its JSON body, when it takes one.
    pub(crate) body: Option<SchemaFn>,
    /// An example body.
    pub(crate) example: Option<Value>,
    /// The schema of its query parameters (an object), when it takes any.
    pub(crate) query: Option<SchemaFn>,
    /// What it answers on success.
    pub(crate) answer: Answer,
    /// The success statuses, the first the usual one.
    pub(crate) statuses: Vec<StatusCode>,
    /// Error statuses beyond the ones every route of its kind can answer.
    pub(crate) errors: Vec<StatusCode>,
}

/// The last segment of a function's type name: `enqueue` for
/// `agentmesh_daemon::api::enqueue`.
fn handler_name<H>() -> &'static str {
    let full = std::any::type_name::<H>();
    full.rsplit("::").next().unwrap_or(full)
}

impl Route {
    /// A route taking `method` at `path`, served by `handler`, answering 200 with
    /// an untyped JSON document until [`Route::answers`] says more.
    ///
    /// # Panics
    ///
    /// When `method` is not one a route can take (a programming error, caught by
    /// the router's tests).
    pub(crate) fn new<H, T>(method: Method, path: &'static str, handler: H, summary: &'static str) -> Route
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("a method a route can take");
        Route {
            method,
            path,
            handler: axum::routing::on(filter, handler),
            operation_id: handler_name::<H>(),
            summary,
            open: false,
            body: None,
            example: None,
            query: None,
            answer: Answer::Json(SchemaGenerator::subschema_for::<Value>),
            statuses: vec![StatusCode::OK],
            errors: Vec::new(),
        }
    }

    /// `GET path`.
    pub(crate) fn get<H, T>(path: &'static str, handler: H, summary: &'static str) -> Route
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        Route::new(Method::GET, path, handler, summary)
    }

    /// `POST path`.
    pub(crate) fn post<H, T>(path: &'static str, handler: H, summary: &'static str) -> Route
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        Route::new(Method::POST, path, handler, summary)
    }

    /// `DELETE path`.
    pub(crate) fn delete<H, T>(path: &'static str, handler: H, summary: &'static str) -> Route
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        Route::new(Method::DELETE, path, handler, summary)
    }

    /// Takes a JSON body of type `B`.
    pub(crate) fn body<B: JsonSchema>(mut self) -> Route {
        self.body = Some(SchemaGenerator::subschema_for::<B>);
        self
    }

    /// An example of the body.
    pub(crate) fn example(mut self, example: Value) -> Route {
        self.example = Some(example);
        self
    }

    /// Takes the query parameters of `Q` (a struct).
    pub(crate) fn query<Q: JsonSchema>(mut self) -> Route {
        self.query = Some(SchemaGenerator::subschema_for::<Q>);
        self
    }

    /// Answers a JSON `V` with 200.
    pub(crate) fn answers<V: JsonSchema>(mut self) -> Route {
        self.answer = Answer::Json(SchemaGenerator::subschema_for::<V>);
        self
    }

    /// Answers a JSON `V` with 201 (it created something).
    pub(crate) fn creates<V: JsonSchema>(mut self) -> Route {
        self.statuses = vec![StatusCode::CREATED];
        self.answers::<V>()
    }

    /// Answers text of `media_type`.
    pub(crate) fn text(mut self, media_type: &'static str, description: &'static str) -> Route {
        self.answer = Answer::Text { media_type, description };
        self
    }

    /// Answers success with `status` too (the same body).
    pub(crate) fn or(mut self, status: StatusCode) -> Route {
        self.statuses.push(status);
        self
    }

    /// Can answer these error statuses besides the ones every route of its
    /// kind can (see `openapi`).
    pub(crate) fn errors(mut self, errors: &[StatusCode]) -> Route {
        self.errors.extend_from_slice(errors);
        self
    }

    /// Names the operation `id` (a closure has no name of its own).
    pub(crate) fn named(mut self, id: &'static str) -> Route {
        self.operation_id = id;
        self
    }

    /// Served without the bearer token.
    pub(crate) fn open(mut self) -> Route {
        self.open = true;
        self
    }
}

/// The router of `routes`: the open ones as they are, the others behind the
/// bearer-token check. Two routes of one path and different methods share it.
pub(crate) fn router(routes: Vec<Route>, state: &AppState) -> Router<AppState> {
    let (mut open, mut secured) = (Router::new(), Router::new());
    let mut any_secured = false;
    for route in routes {
        if route.open {
            open = open.route(route.path, route.handler);
        } else {
            secured = secured.route(route.path, route.handler);
            any_secured = true;
        }
    }
    if any_secured {
        secured = secured.route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token));
    }
    open.merge(secured)
}
