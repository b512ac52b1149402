//! `eckpt bench transport`: authenticated frames over loopback TCP, over TCP inside TLS 1.3
//! (`eckpt up --tls`) and over a Unix socket, back to back in one run, with the framing and
//! checksums the cluster uses — why agents on one host talk over Unix sockets (local IPC
//! between co-located processes), and what TLS costs against the same TCP.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use eckpt_proto::{connect, listen, ClusterSecret, ClusterTls, Endpoint, TransportKind, DEFAULT_MAX_PAYLOAD};
use serde::{Deserialize, Serialize};

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
    /// Repetitions (TCP, TLS, then Unix each time); medians are reported.
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
    tls_gbytes_per_s: f64,
    unix_gbytes_per_s: f64,
    /// Median of per-repetition TLS / TCP ratios.
    tls_fraction: f64,
    /// Median of per-repetition Unix / TCP ratios.
    unix_speedup: f64,
}

pub fn run(args: Args) -> Result<i32> {
    let frame = usize::try_from(args.frame_size)?;
    let runs = (0..args.reps.max(1))
        .map(|_| compare_transports(args.bytes, frame))
        .collect::<Result<Vec<_>>>()?;
    let pick = |f: &dyn Fn(&TransportComparison) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let report = Report {
        bytes: args.bytes,
        frame_size: args.frame_size,
        tcp_gbytes_per_s: pick(&|c| c.tcp.gbytes_per_s),
        tls_gbytes_per_s: pick(&|c| c.tls.gbytes_per_s),
        unix_gbytes_per_s: pick(&|c| c.unix.gbytes_per_s),
        tls_fraction: pick(&|c| c.tls_fraction),
        unix_speedup: pick(&|c| c.unix_speedup),
    };
    if args.json {
        print_json(&report);
    } else {
        println!(
            "loopback TCP {:.2} GB/s, TCP in TLS 1.3 {:.2} GB/s ({:.2} of TCP), Unix socket {:.2} GB/s: Unix {:.2}x ({} B frames, medians of {})",
            report.tcp_gbytes_per_s,
            report.tls_gbytes_per_s,
            report.tls_fraction,
            report.unix_gbytes_per_s,
            report.unix_speedup,
            report.frame_size,
            args.reps.max(1)
        );
    }
    Ok(0)
}

/// How long the receiver waits for the sender to connect before giving up, so a sender
/// that failed early cannot leave the benchmark hanging.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

/// One transport's measured throughput.
#[derive(Debug, Clone, Serialize)]
pub struct TransportBench {
    /// Transport measured.
    transport: TransportKind,
    /// Inside TLS 1.3 (TCP only).
    tls: bool,
    /// Payload bytes streamed.
    bytes: u64,
    /// Payload bytes per data frame (the last frame may be shorter).
    frame_size: usize,
    /// Data frames sent.
    frames: u64,
    /// From the first frame sent to the receiver's acknowledgement of the last (after the
    /// handshake; includes checksumming on both sides).
    seconds: f64,
    /// Payload throughput in gigabits (10⁹ bits) per second, the unit of link rates.
    gbps: f64,
    /// Payload throughput in gigabytes (10⁹ bytes) per second.
    gbytes_per_s: f64,
    /// Data frames per second.
    frames_per_s: f64,
}

/// TCP and Unix measured back to back in one run, so they compare under the same load.
#[derive(Debug, Clone, Serialize)]
struct TransportComparison {
    /// Loopback TCP.
    tcp: TransportBench,
    /// Loopback TCP inside TLS 1.3.
    tls: TransportBench,
    /// TLS throughput divided by TCP throughput.
    tls_fraction: f64,
    /// Unix domain socket.
    unix: TransportBench,
    /// Unix throughput divided by TCP throughput.
    unix_speedup: f64,
}

/// The receiver's acknowledgement: how many payload bytes it received and verified.
#[derive(Serialize, Deserialize)]
struct Received {
    bytes: u64,
}

/// Streams `bytes` of payload in frames of `frame_size` bytes from one thread to another
/// over an authenticated connection of the given kind (loopback TCP on 127.0.0.1, or a Unix
/// socket in the temporary directory), and reports the throughput. Each side runs its own
/// single-threaded runtime on its own OS thread, so this may be called from anywhere,
/// including inside an async runtime (it blocks the calling thread).
pub fn bench_transport(kind: TransportKind, bytes: u64, frame_size: usize) -> Result<TransportBench> {
    bench_with(kind, &ClusterSecret::generate()?, bytes, frame_size)
}

/// [`bench_transport`] over loopback TCP inside TLS 1.3, with an identity made for it.
fn bench_tls(bytes: u64, frame_size: usize) -> Result<TransportBench> {
    let dir = tempfile::tempdir()?;
    let tls = ClusterTls::create_file(&dir.path().join("tls.pem"))?;
    let secret = ClusterSecret::generate()?.with_tls(tls);
    bench_with(TransportKind::Tcp, &secret, bytes, frame_size)
}

fn bench_with(
    kind: TransportKind,
    secret: &ClusterSecret,
    bytes: u64,
    frame_size: usize,
) -> Result<TransportBench> {
    if bytes == 0 {
        bail!("bytes to stream must be at least 1");
    }
    if frame_size == 0 || frame_size > DEFAULT_MAX_PAYLOAD as usize {
        bail!("frame size {frame_size} must be between 1 and {DEFAULT_MAX_PAYLOAD} bytes");
    }
    let endpoint = match kind {
        TransportKind::Tcp => Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 0,
        },
        TransportKind::Unix => {
            let name = format!(
                "eckpt-bench-{}-{:016x}.sock",
                std::process::id(),
                rand::random::<u64>()
            );
            Endpoint::Unix(std::env::temp_dir().join(name))
        }
    };
    let (ready_tx, ready_rx) = mpsc::channel::<Endpoint>();
    std::thread::scope(|scope| {
        let receiver = scope.spawn(|| run_on_own_runtime(receive(&endpoint, secret, bytes, ready_tx)));
        let sender = run_on_own_runtime(async {
            let target = ready_rx
                .recv()
                .map_err(|_| anyhow!("benchmark receiver could not listen on {endpoint}"))?;
            send(&target, secret, bytes, frame_size).await
        });
        let received = receiver
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The receiver's error is the cause when both failed (the sender then sees a closed
        // connection).
        received?;
        let (frames, seconds) = sender?;
        let per_s = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
        Ok(TransportBench {
            transport: kind,
            tls: secret.tls().is_some(),
            bytes,
            frame_size,
            frames,
            seconds,
            gbps: per_s(bytes as f64 * 8.0) / 1e9,
            gbytes_per_s: per_s(bytes as f64) / 1e9,
            frames_per_s: per_s(frames as f64),
        })
    })
}

/// Runs [`bench_transport`] for TCP, TCP in TLS, then Unix, with the same parameters.
fn compare_transports(bytes: u64, frame_size: usize) -> Result<TransportComparison> {
    let tcp = bench_transport(TransportKind::Tcp, bytes, frame_size)?;
    let tls = bench_tls(bytes, frame_size)?;
    let unix = bench_transport(TransportKind::Unix, bytes, frame_size)?;
    let of_tcp = |other: &TransportBench| {
        if tcp.gbytes_per_s > 0.0 {
            other.gbytes_per_s / tcp.gbytes_per_s
        } else {
            0.0
        }
    };
    Ok(TransportComparison {
        tls_fraction: of_tcp(&tls),
        unix_speedup: of_tcp(&unix),
        tcp,
        tls,
        unix,
    })
}

fn run_on_own_runtime<T>(work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a benchmark runtime")?
        .block_on(work)
}

async fn receive(
    endpoint: &Endpoint,
    secret: &ClusterSecret,
    bytes: u64,
    ready: mpsc::Sender<Endpoint>,
) -> Result<()> {
    let listener = listen(endpoint, secret).await?;
    // The sender may already have failed and gone; then accept times out below.
    let _ = ready.send(listener.local_endpoint().clone());
    let incoming = tokio::time::timeout(ACCEPT_TIMEOUT, listener.accept())
        .await
        .map_err(|_| anyhow!("benchmark sender never connected"))??;
    let mut conn = incoming.authenticate().await?;
    let mut buf = Vec::new();
    let mut received = 0u64;
    while received < bytes {
        conn.recv_data(&mut buf).await?;
        received += buf.len() as u64;
    }
    Ok(conn.send_control(&Received { bytes: received }).await?)
}

async fn send(
    target: &Endpoint,
    secret: &ClusterSecret,
    bytes: u64,
    frame_size: usize,
) -> Result<(u64, f64)> {
    let mut conn = connect(target, secret).await?;
    // Not all zeros, so nothing along the path can shortcut the data.
    let block: Vec<u8> = (0..frame_size)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut frames = 0u64;
    while sent < bytes {
        let n = (bytes - sent).min(frame_size as u64) as usize;
        conn.send_data(&block[..n]).await?;
        sent += n as u64;
        frames += 1;
    }
    let ack: Received = conn.recv_control().await?;
    let seconds = start.elapsed().as_secs_f64();
    if ack.bytes != bytes {
        bail!("receiver acknowledged {} bytes, {bytes} were sent", ack.bytes);
    }
    Ok((frames, seconds))
}

#[cfg(test)]
mod tests {
    //! On small sizes: the numbers are consistent, not a performance claim.

    use super::*;

    #[test]
    fn bench_reports_consistent_numbers_for_both_transports() {
        for kind in [TransportKind::Tcp, TransportKind::Unix] {
            let r = bench_transport(kind, 8 << 20, 1 << 20).unwrap();
            assert_eq!(r.transport, kind);
            assert_eq!(r.bytes, 8 << 20);
            assert_eq!(r.frame_size, 1 << 20);
            assert_eq!(r.frames, 8);
            assert!(r.seconds > 0.0 && r.seconds < 60.0, "{r:?}");
            assert!(r.gbps > 0.0, "{r:?}");
            assert!(
                (r.gbps - 8.0 * r.gbytes_per_s).abs() < 1e-9 * r.gbps.max(1.0),
                "{r:?}"
            );
            assert!((r.frames_per_s * r.seconds - 8.0).abs() < 1e-6, "{r:?}");
            let json = serde_json::to_value(&r).unwrap();
            assert_eq!(json["transport"], kind.to_string());
        }
    }

    #[test]
    fn last_frame_may_be_short() {
        let r = bench_transport(TransportKind::Unix, 1000, 300).unwrap();
        assert_eq!(r.frames, 4);
        assert_eq!(r.bytes, 1000);
    }

    #[test]
    fn comparison_runs_all_three_in_one_call() {
        let c = compare_transports(2 << 20, 256 << 10).unwrap();
        assert_eq!((c.tcp.transport, c.tcp.tls), (TransportKind::Tcp, false));
        assert_eq!((c.tls.transport, c.tls.tls), (TransportKind::Tcp, true));
        assert_eq!((c.unix.transport, c.unix.tls), (TransportKind::Unix, false));
        assert_eq!(c.tls.frames, 8, "every frame crossed TLS");
        assert!((c.unix_speedup - c.unix.gbytes_per_s / c.tcp.gbytes_per_s).abs() < 1e-9);
        assert!((c.tls_fraction - c.tls.gbytes_per_s / c.tcp.gbytes_per_s).abs() < 1e-9);
    }

    #[test]
    fn nonsense_sizes_are_refused() {
        assert!(bench_transport(TransportKind::Tcp, 0, 1024).is_err());
        assert!(bench_transport(TransportKind::Tcp, 1024, 0).is_err());
        let err = bench_transport(TransportKind::Unix, 1024, 1 << 30).unwrap_err();
        assert!(err.to_string().contains("1073741824"), "{err}");
    }
}
