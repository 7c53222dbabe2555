//! Real servers for the workspace's tests: `redis-server` plain or over TLS (certificates made
//! here), with ACL users from an aclfile, replicas, and `redis-sentinel` watching a master. Each
//! listens on a free loopback port and is killed when dropped. A server without the module reads
//! a wall clock the test sets (`WallClock`). No mocks: what a test talks to is
//! the server a production fleet runs.

pub mod certs;
pub mod place;
pub mod rules;
pub mod sentinel;
pub mod server;
pub mod wall_clock;

pub use certs::{Pair, Pki, ServerCert};
pub use place::{free_port, scratch_dir};
pub use rules::{
    minimal_functions_acl, minimal_module_acl, minimal_regions_acl, module_path,
    FUNCTIONS_COMMANDS, MODULE_COMMANDS, REGIONS_COMMANDS,
};
pub use sentinel::Sentinel;
pub use server::{ClientCerts, Options, Server, Tls};
pub use wall_clock::WallClock;
