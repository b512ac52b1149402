//! `eckpt bench codec`: eckpt's GF kernels next to memcpy and Debian's ISA-L (same buffers)
//! and klauspost/reedsolomon (its harness, same shape, same kernel level), all in the same
//! run, repetition by repetition. GB/s = 10^9 data bytes per second: encode and decode
//! count the stripe's `k · B` data bytes, update counts the one changed shard's `B` bytes.

use std::path::PathBuf;

use anyhow::{Context, Result};
use eckpt_codec::{Code, CodeKind};
use eckpt_system_isal::SystemIsal;
use serde::Serialize;

use super::klauspost::{self, Harness};
use super::stats::{interleaved_samples, median, median_ratio};
use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Data shards.
    #[arg(long, default_value_t = 10)]
    k: usize,
    /// Parity shards.
    #[arg(long, default_value_t = 4)]
    m: usize,
    /// Bytes per shard.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block_size: u64,
    /// Threads for eckpt's kernels (the byte range is split between them; the codec's pool
    /// runs at most one per core).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// The klauspost/reedsolomon harness to run in each repetition. Default: the one `make
    /// klauspost` builds (`target/klauspost-bench` beside this `eckpt`, else in the
    /// repository it was built from), and only if that file and every directory above it
    /// belong to this user or root and nobody else can write into its directory (a default
    /// anyone could have planted is skipped, saying why).
    #[arg(long, value_name = "PATH")]
    klauspost: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What the bench prints.
#[derive(Serialize)]
struct Report {
    k: usize,
    m: usize,
    block_size: u64,
    threads: usize,
    /// The ISA levels this CPU has.
    cpu_isa: Vec<&'static str>,
    /// The kernel eckpt ran (`ECKPT_ISA`, else the CPU's best).
    kernel: &'static str,
    encode_gbps: f64,
    update_gbps: f64,
    decode_gbps: f64,
    memcpy_gbps: f64,
    /// Debian's libisal (2.30), single call per operation, single thread. Ratios are the
    /// median over repetitions of (its time / eckpt's time), both timed in each repetition.
    system_isal: Option<SystemIsalReport>,
    /// klauspost/reedsolomon at the same kernel level, one harness run per repetition.
    /// Ratios are the median over repetitions of (eckpt's GB/s / its GB/s).
    klauspost: Option<KlauspostReport>,
}

#[derive(Serialize)]
struct KlauspostReport {
    library: String,
    variant: &'static str,
    encode_gbps: f64,
    update_gbps: f64,
    decode_gbps: f64,
    encode_ratio: f64,
    update_ratio: f64,
    decode_ratio: f64,
}

#[derive(Serialize)]
struct SystemIsalReport {
    encode_gbps: f64,
    update_gbps: f64,
    decode_gbps: f64,
    encode_ratio: f64,
    update_ratio: f64,
    decode_ratio: f64,
}

/// Seconds each operation is repeated for in one sample.
const MIN_SECONDS: f64 = 0.1;

pub fn run(args: Args) -> Result<i32> {
    let code = Code::new(CodeKind::Cauchy, args.k, args.m)?;
    let (k, m) = (args.k, args.m);
    let len = usize::try_from(args.block_size).context("block size too large")?;
    let data: Vec<Vec<u8>> = (0..k).map(|i| pseudo_random(len, i as u64 + 1)).collect();
    let delta = pseudo_random(len, 999);
    let inputs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let mut parity = vec![vec![0u8; len]; m];
    let mut copy = vec![0u8; k * len];
    let threads = args.threads;

    // Decode: the first min(m, k) data shards lost, rebuilt from the first k survivors.
    code.encode(
        &inputs,
        &mut parity.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
    )?;
    let shards: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
    let erased: Vec<usize> = (0..m.min(k)).collect();
    let decoder = code.decoder(&erased)?;
    let survivors: Vec<&[u8]> = decoder
        .survivors()
        .iter()
        .map(|&s| shards[s].as_slice())
        .collect();
    let mut rebuilt = vec![vec![0u8; len]; erased.len()];

    let stripe_bytes = (k * len) as f64;
    let gbps = |bytes: f64, seconds: f64| bytes / seconds / 1e9;

    let isal = SystemIsal::load()
        .map_err(|e| eprintln!("eckpt: note: no system ISA-L to compare with: {e}"))
        .ok();
    let isal_tables = isal.as_ref().map(|isal| {
        (
            isal.init_tables(k, m, &code.generator()[k * k..]),
            isal.init_tables(k, erased.len(), decoder.map().coefficients()),
        )
    });

    let mut updated = parity.clone();
    let mut ops: Vec<Box<dyn FnMut() + '_>> = vec![
        Box::new(|| {
            for (i, d) in data.iter().enumerate() {
                copy[i * len..(i + 1) * len].copy_from_slice(std::hint::black_box(d));
            }
        }),
        Box::new(|| {
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            code.parity_map()
                .apply_threaded(&inputs, &mut outs, threads)
                .expect("shapes fit");
        }),
        Box::new(|| {
            let mut outs: Vec<&mut [u8]> = updated.iter_mut().map(|p| p.as_mut_slice()).collect();
            code.parity_map()
                .accumulate_threaded(k / 2, &delta, &mut outs, threads)
                .expect("shapes fit");
        }),
        Box::new(|| {
            let mut outs: Vec<&mut [u8]> = rebuilt.iter_mut().map(|p| p.as_mut_slice()).collect();
            decoder
                .map()
                .apply_threaded(&survivors, &mut outs, threads)
                .expect("shapes fit");
        }),
    ];
    if let (Some(isal), Some((tables, decode_tables))) = (&isal, &isal_tables) {
        let mut isal_parity = vec![vec![0u8; len]; m];
        let mut isal_rebuilt = vec![vec![0u8; len]; erased.len()];
        let (inputs, survivors, delta) = (&inputs, &survivors, &delta);
        ops.push(Box::new(move || {
            isal.encode(
                tables,
                inputs,
                &mut isal_parity
                    .iter_mut()
                    .map(|p| p.as_mut_slice())
                    .collect::<Vec<_>>(),
            )
        }));
        let mut update_parity = vec![vec![0u8; len]; m];
        ops.push(Box::new(move || {
            isal.update(
                tables,
                k,
                k / 2,
                delta,
                &mut update_parity
                    .iter_mut()
                    .map(|p| p.as_mut_slice())
                    .collect::<Vec<_>>(),
            )
        }));
        ops.push(Box::new(move || {
            isal.encode(
                decode_tables,
                survivors,
                &mut isal_rebuilt
                    .iter_mut()
                    .map(|p| p.as_mut_slice())
                    .collect::<Vec<_>>(),
            )
        }));
    }
    let kernel = code.parity_map().kernel();
    let mut harness = (len % 1024 == 0)
        .then(|| Harness::find(args.klauspost.as_deref()))
        .flatten();
    let mut op_refs: Vec<&mut dyn FnMut()> =
        ops.iter_mut().map(|op| op.as_mut() as &mut dyn FnMut()).collect();
    let mut samples = vec![Vec::new(); op_refs.len()];
    let mut theirs = Vec::new();
    for _ in 0..args.reps.max(1) {
        for (all, one) in samples
            .iter_mut()
            .zip(interleaved_samples(1, MIN_SECONDS, &mut op_refs))
        {
            all.extend(one);
        }
        if let Some(h) = harness.as_mut() {
            theirs.push(h.run(k, m, args.block_size, threads, kernel, MIN_SECONDS)?);
        }
    }
    drop(op_refs);
    drop(ops);
    anyhow::ensure!(
        erased.iter().zip(&rebuilt).all(|(&e, r)| *r == shards[e]),
        "decode produced wrong bytes"
    );
    let [memcpy, encode, update, decode] = [0, 1, 2, 3].map(|i| median(&samples[i]));
    let system_isal = (samples.len() == 7).then(|| SystemIsalReport {
        encode_gbps: gbps(stripe_bytes, median(&samples[4])),
        update_gbps: gbps(len as f64, median(&samples[5])),
        decode_gbps: gbps(stripe_bytes, median(&samples[6])),
        encode_ratio: median_ratio(&samples[4], &samples[1]),
        update_ratio: median_ratio(&samples[5], &samples[2]),
        decode_ratio: median_ratio(&samples[6], &samples[3]),
    });
    let klauspost = harness.filter(|_| !theirs.is_empty()).map(|h| {
        // Per repetition: eckpt's GB/s over the harness's.
        let ratio = |op: usize, bytes: f64, of: fn(&klauspost::Figures) -> f64| {
            let ours: Vec<f64> = samples[op].iter().map(|&t| gbps(bytes, t)).collect();
            let theirs: Vec<f64> = theirs.iter().map(of).collect();
            (median(&theirs), median_ratio(&ours, &theirs))
        };
        let (encode_gbps, encode_ratio) = ratio(1, stripe_bytes, |f| f.encode);
        let (update_gbps, update_ratio) = ratio(2, len as f64, |f| f.update);
        let (decode_gbps, decode_ratio) = ratio(3, stripe_bytes, |f| f.decode);
        KlauspostReport {
            library: h.library,
            variant: klauspost::variant(kernel),
            encode_gbps,
            update_gbps,
            decode_gbps,
            encode_ratio,
            update_ratio,
            decode_ratio,
        }
    });

    let report = Report {
        k,
        m,
        block_size: args.block_size,
        threads,
        cpu_isa: eckpt_codec::cpu_isa(),
        kernel: kernel.name(),
        encode_gbps: gbps(stripe_bytes, encode),
        update_gbps: gbps(len as f64, update),
        decode_gbps: gbps(stripe_bytes, decode),
        memcpy_gbps: gbps(stripe_bytes, memcpy),
        system_isal,
        klauspost,
    };
    if kernel == eckpt_codec::Kernel::Reference {
        eprintln!("eckpt: warning: the portable reference kernel runs here: slow");
    }
    if args.json {
        print_json(&report);
    } else {
        print_text(&report);
    }
    Ok(0)
}

fn print_text(r: &Report) {
    println!(
        "codec bench: k={} m={} block={} B threads={} cpu: {} kernel: {}",
        r.k,
        r.m,
        r.block_size,
        r.threads,
        r.cpu_isa.join(" "),
        r.kernel
    );
    println!("  memcpy   {:7.2} GB/s", r.memcpy_gbps);
    let s = r.system_isal.as_ref();
    let kp = r.klauspost.as_ref();
    let line = |name: &str, ours: f64, isal: Option<(f64, f64)>, kp: Option<(f64, f64)>| {
        let mut text = format!("  {name:<8} {ours:7.2} GB/s");
        if let Some((gbps, ratio)) = isal {
            text += &format!("   system ISA-L {gbps:7.2} GB/s ({ratio:.2}x)");
        }
        if let Some((gbps, ratio)) = kp {
            text += &format!("   klauspost {gbps:7.2} GB/s ({ratio:.2}x)");
        }
        println!("{text}");
    };
    line(
        "encode",
        r.encode_gbps,
        s.map(|s| (s.encode_gbps, s.encode_ratio)),
        kp.map(|k| (k.encode_gbps, k.encode_ratio)),
    );
    line(
        "update",
        r.update_gbps,
        s.map(|s| (s.update_gbps, s.update_ratio)),
        kp.map(|k| (k.update_gbps, k.update_ratio)),
    );
    line(
        "decode",
        r.decode_gbps,
        s.map(|s| (s.decode_gbps, s.decode_ratio)),
        kp.map(|k| (k.decode_gbps, k.decode_ratio)),
    );
    if let Some(k) = kp {
        println!("  (klauspost: {}, variant {})", k.library, k.variant);
    }
}

/// Deterministic incompressible bytes (xorshift), so runs are comparable.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}
