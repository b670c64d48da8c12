//! The daemon's HTTP tests, as one test binary: `api` drives every route of the
//! API over a real listener on loopback, `dashboard` the dashboard's sign-in,
//! assets, headers and live stream.

mod api;
mod dashboard;
