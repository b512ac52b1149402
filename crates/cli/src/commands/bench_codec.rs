//! `eckpt bench codec`: eckpt's GF kernels next to memcpy and Debian's ISA-L, same buffers,
//! same run. GB/s = 10^9 data bytes per second: encode and decode count the stripe's `k · B`
//! data bytes, update counts the one changed shard's `B` bytes.

use anyhow::{Context, Result};
use eckpt_codec::system_isal::SystemIsal;
use eckpt_codec::{Code, CodeKind};
use serde::Serialize;

use super::bench::median_seconds;
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
    /// Threads for eckpt's kernels (the byte range is split between them).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 7)]
    reps: usize,
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
    kernel: &'static str,
    encode_gbps: f64,
    update_gbps: f64,
    decode_gbps: f64,
    memcpy_gbps: f64,
    /// Debian's libisal (2.30), single call per operation, single thread.
    system_isal: Option<SystemIsalReport>,
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
    let reps = args.reps;
    let min = 0.05;

    let memcpy = median_seconds(reps, min, || {
        for (i, d) in data.iter().enumerate() {
            copy[i * len..(i + 1) * len].copy_from_slice(std::hint::black_box(d));
        }
    });
    let encode = median_seconds(reps, min, || {
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        code.parity_map()
            .apply_threaded(&inputs, &mut outs, threads)
            .expect("shapes fit");
    });
    let update = median_seconds(reps, min, || {
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        code.parity_map()
            .accumulate_threaded(k / 2, &delta, &mut outs, threads)
            .expect("shapes fit");
    });
    let decode = median_seconds(reps, min, || {
        let mut outs: Vec<&mut [u8]> = rebuilt.iter_mut().map(|p| p.as_mut_slice()).collect();
        decoder
            .map()
            .apply_threaded(&survivors, &mut outs, threads)
            .expect("shapes fit");
    });
    anyhow::ensure!(
        erased.iter().zip(&rebuilt).all(|(&e, r)| *r == shards[e]),
        "decode produced wrong bytes"
    );

    let system_isal = match SystemIsal::load() {
        Ok(isal) => {
            let tables = isal.init_tables(k, m, &code.generator()[k * k..]);
            let decode_tables = isal.init_tables(k, erased.len(), decoder.map().coefficients());
            let s_encode = median_seconds(reps, min, || {
                isal.encode(
                    &tables,
                    &inputs,
                    &mut parity.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
                )
            });
            let s_update = median_seconds(reps, min, || {
                isal.update(
                    &tables,
                    k,
                    k / 2,
                    &delta,
                    &mut parity.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
                )
            });
            let s_decode = median_seconds(reps, min, || {
                isal.encode(
                    &decode_tables,
                    &survivors,
                    &mut rebuilt.iter_mut().map(|p| p.as_mut_slice()).collect::<Vec<_>>(),
                )
            });
            Some(SystemIsalReport {
                encode_gbps: gbps(stripe_bytes, s_encode),
                update_gbps: gbps(len as f64, s_update),
                decode_gbps: gbps(stripe_bytes, s_decode),
                encode_ratio: s_encode / encode,
                update_ratio: s_update / update,
                decode_ratio: s_decode / decode,
            })
        }
        Err(e) => {
            eprintln!("eckpt: note: no system ISA-L to compare with: {e}");
            None
        }
    };

    let report = Report {
        k,
        m,
        block_size: args.block_size,
        threads,
        kernel: eckpt_codec::kernel_name(),
        encode_gbps: gbps(stripe_bytes, encode),
        update_gbps: gbps(len as f64, update),
        decode_gbps: gbps(stripe_bytes, decode),
        memcpy_gbps: gbps(stripe_bytes, memcpy),
        system_isal,
    };
    if !eckpt_codec::is_native() {
        eprintln!("eckpt: warning: {}", eckpt_codec::kernel_name());
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
        "codec bench: k={} m={} block={} B threads={} kernel: {}",
        r.k, r.m, r.block_size, r.threads, r.kernel
    );
    println!("  memcpy   {:7.2} GB/s", r.memcpy_gbps);
    let line = |name: &str, ours: f64, theirs: Option<(f64, f64)>| match theirs {
        Some((gbps, ratio)) => {
            println!("  {name:<8} {ours:7.2} GB/s   system ISA-L {gbps:7.2} GB/s   ratio {ratio:.2}x")
        }
        None => println!("  {name:<8} {ours:7.2} GB/s"),
    };
    let s = r.system_isal.as_ref();
    line(
        "encode",
        r.encode_gbps,
        s.map(|s| (s.encode_gbps, s.encode_ratio)),
    );
    line(
        "update",
        r.update_gbps,
        s.map(|s| (s.update_gbps, s.update_ratio)),
    );
    line(
        "decode",
        r.decode_gbps,
        s.map(|s| (s.decode_gbps, s.decode_ratio)),
    );
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
