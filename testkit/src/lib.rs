//! Real servers for the workspace's tests, the one harness every package's tests start them
//! with: `redis-server` plain or over TLS (certificates made here), with the module (its debug
//! clock on) or another module or none, with ACL users from an aclfile, replicas, cluster nodes
//! (`cluster_port`), restarts, and `redis-sentinel` watching a master. Each listens on a free
//! loopback port in a scratch directory of its own, is killed when dropped, and leaves its
//! directory behind only when its test failed. A server without the module reads a wall clock
//! the test sets (`WallClock`). No mocks: what a test talks to is the server a production fleet
//! runs. What only one package needs (the module's algorithm tables, the client's proxy) lives
//! in that package's `tests/support`, on top of this.

pub mod certs;
pub mod debug_clock;
pub mod place;
mod process;
pub mod rules;
pub mod sentinel;
pub mod server;
pub mod wall_clock;

pub use certs::{Pair, Pki, ServerCert};
pub use debug_clock::{clock_advance, clock_set, T0_MS};
pub use place::{cluster_port, free_port, scratch_dir, Scratch, BUS_OFFSET};
pub use process::START_TIMEOUT;
pub use rules::{
    minimal_functions_acl, minimal_module_acl, minimal_regions_acl, module_path,
    FUNCTIONS_COMMANDS, MODULE_COMMANDS, REGIONS_COMMANDS,
};
pub use sentinel::Sentinel;
pub use server::{ClientCerts, Options, Server, Tls};
pub use wall_clock::WallClock;
