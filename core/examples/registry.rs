//! Prints the registry (`listed::tsv`: one algorithm a line, tab-separated), for the tools
//! outside Rust that derive their list of algorithms from it (`scripts/benchkit/registry.py`):
//! `cargo run -q -p redis-ratelimit-core --example registry`.

fn main() {
    print!("{}", ratelimit_core::algo::listed::tsv());
}
