//! Transport throughput: streams authenticated data frames over loopback TCP and a Unix
//! socket, so the gain of seed 004's local IPC is measured on the machine at hand, with the
//! same framing and checksums the cluster uses.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::auth::ClusterSecret;
use crate::error::ProtoError;
use crate::frame::DEFAULT_MAX_PAYLOAD;
use crate::transport::{connect, listen, Endpoint, TransportKind};

/// How long the receiver waits for the sender to connect before giving up, so a sender
/// that failed early cannot leave the benchmark hanging.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

/// One transport's measured throughput.
#[derive(Debug, Clone, Serialize)]
pub struct TransportBench {
    /// Transport measured.
    pub transport: TransportKind,
    /// Payload bytes streamed.
    pub bytes: u64,
    /// Payload bytes per data frame (the last frame may be shorter).
    pub frame_size: usize,
    /// Data frames sent.
    pub frames: u64,
    /// From the first frame sent to the receiver's acknowledgement of the last (after the
    /// handshake; includes checksumming on both sides).
    pub seconds: f64,
    /// Payload throughput in gigabits (10⁹ bits) per second, the unit of link rates.
    pub gbps: f64,
    /// Payload throughput in gigabytes (10⁹ bytes) per second.
    pub gbytes_per_s: f64,
    /// Data frames per second.
    pub frames_per_s: f64,
}

/// TCP and Unix measured back to back in one run, so they compare under the same load.
#[derive(Debug, Clone, Serialize)]
pub struct TransportComparison {
    /// Loopback TCP.
    pub tcp: TransportBench,
    /// Unix domain socket.
    pub unix: TransportBench,
    /// Unix throughput divided by TCP throughput.
    pub unix_speedup: f64,
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
pub fn bench_transport(
    kind: TransportKind,
    bytes: u64,
    frame_size: usize,
) -> Result<TransportBench, ProtoError> {
    if bytes == 0 {
        return Err(ProtoError::InvalidArgument(
            "bytes to stream must be at least 1".into(),
        ));
    }
    if frame_size == 0 || frame_size > DEFAULT_MAX_PAYLOAD as usize {
        return Err(ProtoError::InvalidArgument(format!(
            "frame size {frame_size} must be between 1 and {DEFAULT_MAX_PAYLOAD} bytes"
        )));
    }
    let secret = ClusterSecret::generate()?;
    let endpoint = match kind {
        TransportKind::Tcp => Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 0,
        },
        TransportKind::Unix => {
            let mut tag = [0u8; 8];
            getrandom::fill(&mut tag).map_err(|e| ProtoError::InvalidArgument(e.to_string()))?;
            let name = format!(
                "eckpt-bench-{}-{:016x}.sock",
                std::process::id(),
                u64::from_le_bytes(tag)
            );
            Endpoint::Unix(std::env::temp_dir().join(name))
        }
    };
    let (ready_tx, ready_rx) = mpsc::channel::<Endpoint>();
    std::thread::scope(|scope| {
        let receiver = scope.spawn(|| run_on_own_runtime(receive(&endpoint, &secret, bytes, ready_tx)));
        let sender = run_on_own_runtime(async {
            let target = ready_rx.recv().map_err(|_| {
                ProtoError::InvalidArgument(format!("benchmark receiver could not listen on {endpoint}"))
            })?;
            send(&target, &secret, bytes, frame_size).await
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

/// Runs [`bench_transport`] for TCP, then for Unix, with the same parameters.
pub fn compare_transports(bytes: u64, frame_size: usize) -> Result<TransportComparison, ProtoError> {
    let tcp = bench_transport(TransportKind::Tcp, bytes, frame_size)?;
    let unix = bench_transport(TransportKind::Unix, bytes, frame_size)?;
    let unix_speedup = if tcp.gbytes_per_s > 0.0 {
        unix.gbytes_per_s / tcp.gbytes_per_s
    } else {
        0.0
    };
    Ok(TransportComparison {
        tcp,
        unix,
        unix_speedup,
    })
}

fn run_on_own_runtime<T>(
    work: impl std::future::Future<Output = Result<T, ProtoError>>,
) -> Result<T, ProtoError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ProtoError::Io {
            context: "starting a benchmark runtime".into(),
            source,
        })?
        .block_on(work)
}

async fn receive(
    endpoint: &Endpoint,
    secret: &ClusterSecret,
    bytes: u64,
    ready: mpsc::Sender<Endpoint>,
) -> Result<(), ProtoError> {
    let listener = listen(endpoint, secret).await?;
    // The sender may already have failed and gone; then accept times out below.
    let _ = ready.send(listener.local_endpoint().clone());
    let incoming = tokio::time::timeout(ACCEPT_TIMEOUT, listener.accept())
        .await
        .map_err(|_| ProtoError::InvalidArgument("benchmark sender never connected".into()))??;
    let mut conn = incoming.authenticate().await?;
    let mut buf = Vec::new();
    let mut received = 0u64;
    while received < bytes {
        conn.recv_data(&mut buf).await?;
        received += buf.len() as u64;
    }
    conn.send_control(&Received { bytes: received }).await
}

async fn send(
    target: &Endpoint,
    secret: &ClusterSecret,
    bytes: u64,
    frame_size: usize,
) -> Result<(u64, f64), ProtoError> {
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
        return Err(ProtoError::InvalidArgument(format!(
            "receiver acknowledged {} bytes, {bytes} were sent",
            ack.bytes
        )));
    }
    Ok((frames, seconds))
}
