//! Which kernel runs: the best the CPU offers, found at run time (never at compile time,
//! so one binary is fast on an AVX2-only Zen 3 and on an AVX-512 + GFNI machine alike), or
//! the level `ECKPT_ISA` forces — to compare levels on one machine, or to reproduce what a
//! smaller CPU would run. A level the CPU lacks is refused with an error naming what it has,
//! never silently replaced.

use crate::CodecError;

/// The environment variable that forces a kernel.
pub const ISA_VARIABLE: &str = "ECKPT_ISA";

/// A family of GF(2^8) multiply-accumulate kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// Byte-at-a-time table lookups ([`crate::reference`]): no SIMD and no ISA-L built.
    Reference,
    /// ISA-L 2.32's own run-time dispatch: CPUs without SSSE3, and other architectures.
    Isal,
    /// eckpt's 128-bit PSHUFB kernel (x86-64 with SSSE3: the floor).
    Ssse3,
    /// eckpt's 256-bit VPSHUFB kernel (AVX2).
    Avx2,
    /// eckpt's 512-bit VPSHUFB kernel (AVX-512F + BW).
    Avx512,
    /// eckpt's 512-bit GF2P8AFFINEQB kernel (AVX-512F + BW + GFNI).
    Gfni,
}

/// Every kernel a build can have, slowest first.
const ALL: [Kernel; 6] = [
    Kernel::Reference,
    Kernel::Isal,
    Kernel::Ssse3,
    Kernel::Avx2,
    Kernel::Avx512,
    Kernel::Gfni,
];

impl Kernel {
    /// The name `ECKPT_ISA` takes and benchmarks report.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Reference => "reference",
            Kernel::Isal => "isal",
            Kernel::Ssse3 => "ssse3",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
            Kernel::Gfni => "gfni",
        }
    }

    /// Whether this process can run the kernel: built in, and the CPU has its instructions.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Reference => true,
            Kernel::Isal => cfg!(feature = "isal"),
            Kernel::Ssse3 | Kernel::Avx2 | Kernel::Avx512 | Kernel::Gfni => cpu_has(self),
        }
    }

    /// Whether the kernel is one of eckpt's own SIMD kernels (an ISA level).
    pub fn is_isa_level(self) -> bool {
        matches!(self, Kernel::Ssse3 | Kernel::Avx2 | Kernel::Avx512 | Kernel::Gfni)
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn cpu_has(kernel: Kernel) -> bool {
    use std::arch::is_x86_feature_detected as has;
    match kernel {
        Kernel::Ssse3 => has!("ssse3"),
        Kernel::Avx2 => has!("avx2"),
        Kernel::Avx512 => has!("avx512f") && has!("avx512bw"),
        Kernel::Gfni => has!("avx512f") && has!("avx512bw") && has!("gfni"),
        Kernel::Reference | Kernel::Isal => true,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has(_kernel: Kernel) -> bool {
    false
}

/// Every kernel this process can run, slowest first: what tests compare with each other.
pub fn supported_kernels() -> Vec<Kernel> {
    ALL.into_iter().filter(|k| k.is_supported()).collect()
}

/// The ISA levels this CPU has (`ssse3`, `avx2`, `avx512`, `gfni`), lowest first: what
/// `eckpt bench codec` prints as the machine's ISA.
pub fn cpu_isa() -> Vec<&'static str> {
    ALL.into_iter()
        .filter(|k| k.is_isa_level() && cpu_has(*k))
        .map(Kernel::name)
        .collect()
}

/// The fastest kernel this process can run.
fn best() -> Kernel {
    *supported_kernels()
        .last()
        .expect("the reference kernel is always supported")
}

/// The kernel `value` (from `ECKPT_ISA`) asks for, if this process can run it.
fn forced(value: &str) -> Result<Kernel, CodecError> {
    let names = || {
        ALL.iter()
            .filter(|k| **k != Kernel::Reference)
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join("|")
    };
    let kernel = ALL
        .into_iter()
        .find(|k| *k != Kernel::Reference && k.name() == value.trim().to_ascii_lowercase())
        .ok_or_else(|| CodecError::Kernel(format!("{ISA_VARIABLE}={value}: expected {}", names())))?;
    if kernel.is_supported() {
        return Ok(kernel);
    }
    let why = if kernel == Kernel::Isal {
        "this build has no ISA-L (feature `isal`)".to_string()
    } else {
        let has = cpu_isa();
        format!(
            "this CPU lacks it (it has: {})",
            if has.is_empty() {
                "none of them".to_string()
            } else {
                has.join(", ")
            }
        )
    };
    Err(CodecError::Kernel(format!(
        "{ISA_VARIABLE}={value} forces the {kernel} kernel, but {why}"
    )))
}

/// The kernel every [`crate::LinearMap`] built without an explicit one uses: `ECKPT_ISA`
/// if set, else the fastest this process can run. Decided once per process; an
/// `ECKPT_ISA` this process cannot honour is an error here and in every constructor.
pub fn kernel() -> Result<Kernel, CodecError> {
    static ACTIVE: std::sync::OnceLock<Result<Kernel, CodecError>> = std::sync::OnceLock::new();
    ACTIVE
        .get_or_init(|| match std::env::var(ISA_VARIABLE) {
            Ok(value) if !value.trim().is_empty() => forced(&value),
            _ => Ok(best()),
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_kernel_can_be_forced_by_name() {
        for kernel in supported_kernels()
            .into_iter()
            .filter(|k| *k != Kernel::Reference)
        {
            assert_eq!(forced(kernel.name()), Ok(kernel));
            assert_eq!(forced(&kernel.name().to_ascii_uppercase()), Ok(kernel));
        }
    }

    #[test]
    fn an_unknown_or_missing_level_is_refused_with_what_the_cpu_has() {
        let err = forced("avx9").unwrap_err().to_string();
        assert!(
            err.contains("ECKPT_ISA=avx9") && err.contains("ssse3|avx2|avx512|gfni"),
            "{err}"
        );
        assert!(forced("reference").is_err(), "the reference is no ISA level");
        for kernel in ALL.into_iter().filter(|k| !k.is_supported()) {
            let err = forced(kernel.name()).unwrap_err().to_string();
            assert!(err.contains(&format!("forces the {kernel} kernel")), "{err}");
        }
    }

    #[test]
    fn levels_are_nested_and_the_best_is_chosen() {
        let levels = cpu_isa();
        let order = ["ssse3", "avx2", "avx512", "gfni"];
        assert_eq!(
            levels.as_slice(),
            &order[..levels.len()],
            "a CPU with a level has the ones below it (the tests of the lower kernels rely on it)"
        );
        assert!(supported_kernels().contains(&best()));
        assert!(supported_kernels().iter().all(|k| *k <= best()));
    }
}
