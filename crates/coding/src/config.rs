//! How a cluster codes its checkpoints: the code, the group shape and the three choices the
//! design measures side by side (incremental mode, parity layout, transfer topology).

use std::fmt;
use std::str::FromStr;

use eckpt_codec::CodeKind;
use serde::{Deserialize, Serialize};

use crate::CodingError;

/// What an epoch's encode covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every epoch encodes the whole image of every node (the baseline, "CP").
    Full,
    /// Incremental stripes: each epoch's deltas, padded to the group's largest, are encoded as
    /// a stripe of their own; the chain of stripes is kept until a full stripe replaces it.
    Stripe,
    /// Parity is updated in place with `X·(old ⊕ new)` of the changed blocks only.
    Update,
}

/// Where parity lives in a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `k` members hold data, `m` hold only parity.
    Dedicated,
    /// Every member holds data and a share of the parity, rotated row by row (RAID-5 style,
    /// SCore's layout): no member's link or disk is special.
    Rotated,
}

/// How partial parity (or decode contributions) travel between members for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// The pipelined parallel encode: the partial parity blocks flow source to source, each adding its
    /// product; the last source delivers each output to its holder.
    Pipeline,
    /// A binary reduction tree over the sources: log-depth critical path.
    Fanin,
    /// Every source sends its block to every output holder, which computes the sum.
    Broadcast,
    /// SCore's ring: like the pipeline, then on around the ring through the output holders,
    /// each keeping its own block; only neighbour links are used.
    Ring,
}

macro_rules! named_enum {
    ($ty:ident, $what:literal, $($variant:ident => $name:literal),+) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The lower-case name used on the command line and in JSON.
            pub fn name(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $ty {
            type Err = CodingError;

            fn from_str(s: &str) -> Result<$ty, CodingError> {
                $ty::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let names: Vec<&str> = $ty::ALL.iter().map(|v| v.name()).collect();
                    CodingError::Invalid(format!("{} {s:?}: expected one of {}", $what, names.join(", ")))
                })
            }
        }
    };
}

named_enum!(Mode, "mode", Full => "full", Stripe => "stripe", Update => "update");
named_enum!(Layout, "layout", Dedicated => "dedicated", Rotated => "rotated");
named_enum!(Topology, "topology", Pipeline => "pipeline", Fanin => "fanin", Broadcast => "broadcast", Ring => "ring");

/// Everything that decides how checkpoint bytes are coded and moved. Fixed when the
/// cluster is brought up and recorded in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodingConfig {
    /// Data shards per group.
    pub k: usize,
    /// Parity shards per group: any `m` lost members of a group are survivable.
    pub m: usize,
    /// The generator matrix (ISA-L's Cauchy by default).
    #[serde(with = "code_name")]
    pub code: CodeKind,
    /// Incremental mode.
    pub mode: Mode,
    /// Parity placement.
    pub layout: Layout,
    /// Transfer topology for encode and decode.
    pub topology: Topology,
    /// Bytes per chunk: the unit of transfer and of pipelining (SCore found that a
    /// 1400-byte unit wastes most of the network; see the block-size sweep).
    pub chunk: u32,
    /// Stripe mode: a full stripe replaces the chain after this many delta stripes.
    pub max_stripes: u32,
}

/// A [`CodeKind`] in JSON is its name (`cauchy`, `rs`).
mod code_name {
    use eckpt_codec::CodeKind;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(code: &CodeKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(code.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CodeKind, D::Error> {
        let name = String::deserialize(d)?;
        CodeKind::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown code {name:?}")))
    }
}

/// Smallest and largest accepted chunk: below 512 B the per-frame overhead dominates; above
/// 16 MiB a chunk no longer pipelines.
pub const CHUNK_RANGE: (u32, u32) = (512, 16 << 20);

impl CodingConfig {
    /// Members of a full group.
    pub fn group_size(&self) -> usize {
        self.k + self.m
    }

    /// Checks the shape: `k ≥ 1`, `m ≥ 1`, `k + m ≤ 255`, a chunk in [`CHUNK_RANGE`] and a
    /// multiple of 64 (the kernels' vector width) unless small.
    pub fn validate(&self) -> Result<(), CodingError> {
        if self.k == 0 || self.m == 0 {
            return Err(CodingError::Invalid(format!(
                "k={} m={}: both must be at least 1",
                self.k, self.m
            )));
        }
        if self.k + self.m > eckpt_codec::MAX_SHARDS {
            return Err(CodingError::Invalid(format!(
                "k+m={} exceeds {} shards",
                self.k + self.m,
                eckpt_codec::MAX_SHARDS
            )));
        }
        let (lo, hi) = CHUNK_RANGE;
        if !(lo..=hi).contains(&self.chunk) {
            return Err(CodingError::Invalid(format!(
                "block size {} outside {lo}..={hi} bytes",
                self.chunk
            )));
        }
        if self.max_stripes == 0 {
            return Err(CodingError::Invalid("max stripes must be at least 1".into()));
        }
        Ok(())
    }
}

impl Default for CodingConfig {
    fn default() -> Self {
        CodingConfig {
            k: 4,
            m: 2,
            code: CodeKind::Cauchy,
            mode: Mode::Full,
            layout: Layout::Dedicated,
            topology: Topology::Pipeline,
            chunk: 1 << 20,
            max_stripes: 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_list_the_choices() {
        for t in Topology::ALL {
            assert_eq!(t.name().parse::<Topology>().unwrap(), *t);
        }
        let err = "star".parse::<Topology>().unwrap_err().to_string();
        assert!(err.contains("pipeline, fanin, broadcast, ring"), "{err}");
        assert_eq!("update".parse::<Mode>().unwrap(), Mode::Update);
        assert_eq!("rotated".parse::<Layout>().unwrap(), Layout::Rotated);
    }

    #[test]
    fn validation_refuses_bad_shapes() {
        let ok = CodingConfig::default();
        assert!(ok.validate().is_ok());
        assert!(CodingConfig { m: 0, ..ok }.validate().is_err());
        assert!(CodingConfig { k: 250, m: 10, ..ok }.validate().is_err());
        assert!(CodingConfig { chunk: 100, ..ok }.validate().is_err());
        assert!(CodingConfig {
            chunk: 32 << 20,
            ..ok
        }
        .validate()
        .is_err());
    }
}
