//! Unix-specific filesystem extensions.
//!
//! Provides implementations of `std::os::unix::fs` traits for shimmed types.

pub mod fs;
