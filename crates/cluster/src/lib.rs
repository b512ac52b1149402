//! Starting and stopping eckpt clusters: `eckpt up/down/join/kill-node` on this host, in
//! network namespaces that emulate hosts, or under another launcher ([`launch`],
//! [`netns`]), and `eckpt clean`, what a failed or killed job left ([`clean`]: only what
//! eckpt made, known by name). The daemons themselves are `eckpt-agent` and
//! `eckpt-coordinator`; what ranks and commands send them lives in `eckpt-cluster-api`.

#![warn(missing_docs)]

pub mod clean;
pub mod launch;
pub mod netns;
