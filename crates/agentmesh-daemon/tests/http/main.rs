//! The daemon's HTTP tests, as one test binary: `api` drives every route of the
//! API over a real listener on loopback, `dashboard` the dashboard's sign-in,
//! assets, headers and live stream, `openapi` the OpenAPI document against the
//! routes the daemon serves.

mod api;
mod dashboard;
mod openapi;
