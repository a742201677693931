//! The `tern` binary.
fn main() {}
