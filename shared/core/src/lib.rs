//! Pure domain of the dynamic pricing service: ids, entries and their validation, the state
//! of an instance and the apply step, signing, and the ports adapters implement.
//! No I/O and no async runtime: adapters live in other crates.

pub mod document;
pub mod entry;
pub mod ids;
pub mod jws;
pub mod lifecycle;
pub mod limits;
pub mod meta;
pub mod model;
pub mod money;
pub mod ports;
pub mod pricing;
pub mod process;
pub mod recalc;
pub mod retention;
pub mod scheduler;
pub mod state;
pub mod submit;
pub mod time;
pub mod validate;
pub mod webhooks;
pub mod work;

/// The interface version implemented (INTERFACE.md).
pub const API_VERSION: &str = "3.1.0";
