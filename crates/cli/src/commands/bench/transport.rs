//! `eckpt bench transport`: authenticated frames over loopback TCP and over a Unix socket,
//! back to back in one run — why agents on one host talk over Unix sockets (seed 004).

use anyhow::Result;
use eckpt_proto::compare_transports;

use super::stats::median;
use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Bytes streamed per measurement.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    bytes: u64,
    /// Payload bytes per frame.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    frame_size: u64,
    /// Repetitions (TCP then Unix each time); medians are reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Report {
    bytes: u64,
    frame_size: u64,
    tcp_gbytes_per_s: f64,
    unix_gbytes_per_s: f64,
    /// Median of per-repetition Unix / TCP ratios.
    unix_speedup: f64,
}

pub fn run(args: Args) -> Result<i32> {
    let frame = usize::try_from(args.frame_size)?;
    let runs = (0..args.reps.max(1))
        .map(|_| compare_transports(args.bytes, frame))
        .collect::<Result<Vec<_>, _>>()?;
    let pick = |f: &dyn Fn(&eckpt_proto::TransportComparison) -> f64| {
        median(&runs.iter().map(f).collect::<Vec<_>>())
    };
    let report = Report {
        bytes: args.bytes,
        frame_size: args.frame_size,
        tcp_gbytes_per_s: pick(&|c| c.tcp.gbytes_per_s),
        unix_gbytes_per_s: pick(&|c| c.unix.gbytes_per_s),
        unix_speedup: pick(&|c| c.unix_speedup),
    };
    if args.json {
        print_json(&report);
    } else {
        println!(
            "loopback TCP {:.2} GB/s, Unix socket {:.2} GB/s: Unix {:.2}x ({} B frames, medians of {})",
            report.tcp_gbytes_per_s,
            report.unix_gbytes_per_s,
            report.unix_speedup,
            report.frame_size,
            args.reps.max(1)
        );
    }
    Ok(0)
}
