//! tern-config: configuration.
