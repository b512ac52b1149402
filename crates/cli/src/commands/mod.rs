//! One module per subcommand: its arguments and what it runs.

pub mod bench;
pub mod calibrate;
pub mod ckpt;
pub mod clean;
pub mod cluster;
pub mod config;
pub mod daemons;
#[cfg(feature = "fault-injection")]
pub mod debug;
pub mod decode;
pub mod delta;
pub mod encode;
pub mod logs;
pub mod model;
pub mod process_cpu;
pub mod report;
pub mod run;
pub mod status_text;
pub mod verify;
