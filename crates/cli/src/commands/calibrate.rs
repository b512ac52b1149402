//! `eckpt model --calibrate`: what the model's costs are on a running cluster. The link is
//! measured between two of its agents (`LinkTest`: rate, and the CPU both agents spend per
//! byte, read from `/proc`); the costs of the agents' code paths on this host — GF
//! arithmetic, checksummed store reads, store writes, hashing, authenticated frames through
//! the queues the agents use — in this process, on files in the cluster directory (where
//! the agents' stores are); the control plane's costs as `eckpt bench control` measures
//! them, on clusters of tiny images at two sizes started on this host with the cluster's
//! coding and time bounds. Saved as the cluster's `model.json`.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use eckpt_cluster::netns::parse_rate;
use eckpt_cluster_api::commands;
use eckpt_cluster_api::dirs::{ClusterDir, ClusterFile};
use eckpt_cluster_api::msg::{LinkTest, NodeInfo, Nodes};
use eckpt_cluster_api::net::{ask_agent, host_identity, open_node};
use eckpt_codec::LinearMap;
use eckpt_model::control::{fit, ControlRun};
use eckpt_model::machine::{netns_burst, Cpu, Hosts, Machine, SHARED_HOST_SHARE, TCP_PAYLOAD};
use eckpt_model::Scenario;
use serde::{Deserialize, Serialize};

use eckpt_proto::{connect, listen, ClusterSecret, Endpoint, TransportKind};

use super::bench::control;
use super::bench::stats::median;
use super::bench::transport::bench_transport;
use super::process_cpu::{agent_pid, cpu_seconds, cpu_seconds_of_all};
use crate::output::default_threads;

/// Format of `model.json`.
pub const CALIBRATION_FORMAT: u32 = 1;

/// What a calibration measured, and the machine it makes of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    /// Format version.
    pub format: u32,
    /// When (seconds since the Unix epoch).
    pub measured_unix: f64,
    /// The cluster directory measured.
    pub dir: PathBuf,
    /// The nominal link rate of the cluster (`tc` rate), if its links are shaped.
    pub link_rate: Option<String>,
    /// The model's machine.
    pub machine: Machine,
    /// Raw samples, for the record.
    pub samples: BTreeMap<String, Vec<f64>>,
}

/// Loads a calibration file.
pub fn load(path: &Path) -> Result<Calibration> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let c: Calibration =
        serde_json::from_slice(&text).with_context(|| format!("{} is not a calibration", path.display()))?;
    if c.format != CALIBRATION_FORMAT {
        bail!(
            "{}: calibration format {} (this eckpt reads {CALIBRATION_FORMAT})",
            path.display(),
            c.format
        );
    }
    c.machine
        .validate()
        .with_context(|| format!("{}", path.display()))?;
    Ok(c)
}

/// Where a cluster keeps its calibration.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(eckpt_cluster_api::dirs::CALIBRATION_FILE)
}

/// Sends `bytes` from `from` to `to` through their links; the seconds it took. `bytes` is
/// about a second of the link's nominal rate: the answer is awaited as long as a peer's
/// stream may take to come.
pub async fn link_test(dir: &ClusterDir, from: &NodeInfo, to: &NodeInfo, bytes: u64) -> Result<f64> {
    let secret = dir.load_secret()?;
    let limit = dir.load()?.deadlines.peer_wait();
    let mut conn = open_node(from, &host_identity(), &secret).await?;
    let request = LinkTest {
        peer: to.clone(),
        bytes,
    };
    ask_agent(&mut conn, &from.name, request, limit)
        .await
        .with_context(|| format!("link test from {}", from.name))
}

/// Every node sends `bytes` to the next at once, as every member of a pipeline does.
async fn ring_test(dir: &ClusterDir, nodes: &[NodeInfo], bytes: u64) -> Result<()> {
    let mut set = tokio::task::JoinSet::new();
    for (i, from) in nodes.iter().enumerate() {
        let (dir, from, to) = (dir.clone(), from.clone(), nodes[(i + 1) % nodes.len()].clone());
        set.spawn(async move { link_test(&dir, &from, &to, bytes).await });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

/// Samples by name.
type Samples = BTreeMap<String, Vec<f64>>;

fn push(samples: &mut Samples, name: &str, value: f64) {
    samples.entry(name.into()).or_default().push(value);
}

/// Measures the cluster in `dir` and this host.
pub fn calibrate(dir: &ClusterDir) -> Result<Calibration> {
    let file: ClusterFile = serde_json::from_slice(
        &std::fs::read(dir.cluster_file())
            .with_context(|| format!("{} is not a cluster", dir.root().display()))?,
    )?;
    let rate = file.netns.as_ref().and_then(|n| n.rate.clone());
    let nominal = rate.as_deref().map(parse_rate).transpose()?.map(|b| b as f64);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let nodes = rt.block_on(commands::coordinator_call(dir, Nodes, |_| {}))?;
    if nodes.len() < 2 {
        bail!(
            "calibration needs two running agents, the cluster has {}",
            nodes.len()
        );
    }
    // About a second of traffic at the nominal rate (256 MiB unshaped).
    let bytes = nominal.map_or(256 << 20, |bits| ((bits / 8.0) as u64).clamp(8 << 20, 256 << 20));
    let mut samples = Samples::new();
    rt.block_on(measure_pair(dir, &nodes, bytes, &mut samples))?;
    rt.block_on(measure_ring(dir, &nodes, bytes, &mut samples))?;
    measure_local(&dir.node(&nodes[0].name), &mut samples)?;
    let mut machine = machine_of(&samples, nodes.len(), nominal, file.deadlines.liveness())?;
    let runs = measure_control(&file, &mut samples)?;
    machine.control = fit(&machine, &runs)?;
    // When it was measured: a stamp.
    #[allow(clippy::disallowed_methods)]
    let measured_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    Ok(Calibration {
        format: CALIBRATION_FORMAT,
        measured_unix,
        dir: dir.root().to_path_buf(),
        link_rate: rate,
        machine,
        samples,
    })
}

/// The link between the first two agents: its rate and the CPU both agents spend per byte
/// (three times), and the round trip of a one-byte message (five times).
async fn measure_pair(dir: &ClusterDir, nodes: &[NodeInfo], bytes: u64, samples: &mut Samples) -> Result<()> {
    let (a, b) = (&nodes[0], &nodes[1]);
    let pids = [agent_pid(dir, &a.name)?, agent_pid(dir, &b.name)?];
    for _ in 0..3 {
        let before = cpu_seconds_of_all(&pids)?;
        let seconds = link_test(dir, a, b, bytes).await?;
        let after = cpu_seconds_of_all(&pids)?;
        push(samples, "link_bps", bytes as f64 / seconds);
        push(samples, "link_cpu_s_per_byte", (after - before) / bytes as f64);
    }
    for _ in 0..5 {
        let seconds = link_test(dir, a, b, 1).await?;
        push(samples, "rtt_s", seconds);
    }
    Ok(())
}

/// Every agent streaming to the next at once (twice): the aggregate rate, the agents' CPU
/// per byte, and the host's cores' time per byte.
async fn measure_ring(dir: &ClusterDir, nodes: &[NodeInfo], bytes: u64, samples: &mut Samples) -> Result<()> {
    let pids: Vec<u32> = nodes
        .iter()
        .map(|n| agent_pid(dir, &n.name))
        .collect::<Result<_>>()?;
    for _ in 0..2 {
        let before = cpu_seconds_of_all(&pids)?;
        let started = Instant::now();
        ring_test(dir, nodes, bytes).await?;
        let wall = started.elapsed().as_secs_f64();
        let after = cpu_seconds_of_all(&pids)?;
        let total = (bytes * nodes.len() as u64) as f64;
        push(samples, "ring_bps", total / wall);
        push(samples, "ring_cpu_s_per_byte", (after - before) / total);
        push(
            samples,
            "ring_host_s_per_byte",
            default_threads() as f64 * wall / total,
        );
    }
    Ok(())
}

/// The machine the samples describe (scanning for changes keeps the reference's kernel
/// tracking cost: the hashing measured is the fallback's). A link byte costs what the
/// agents used per byte in the pair or the ring test (the more). When the ring could not reach the links' rate, the
/// host's cores were the limit: the agents then got the share `ring CPU / (cores × wall)` of
/// them, and the model's shared host gets that many cores; otherwise the reference share.
/// Fixed costs are the reference's: no measurement of a running cluster shows them (the
/// control plane's are fitted afterwards, [`measure_control`]).
/// A node loss is detected after the cluster's liveness period (`liveness`).
fn machine_of(
    samples: &Samples,
    nodes: usize,
    nominal: Option<f64>,
    liveness: std::time::Duration,
) -> Result<Machine> {
    let pick = |name: &str| median(&samples[name]);
    let best = samples["link_bps"].iter().copied().fold(0.0, f64::max);
    let ring_bound = pick("ring_bps") < 0.8 * nodes as f64 * best;
    let share = match ring_bound {
        true => (pick("ring_cpu_s_per_byte") / pick("ring_host_s_per_byte")).clamp(0.3, 1.0),
        false => SHARED_HOST_SHARE,
    };
    let link_cpu = pick("link_cpu_s_per_byte").max(pick("ring_cpu_s_per_byte"));
    let reference = Machine::reference(best * 8.0 / TCP_PAYLOAD);
    let machine = Machine {
        link_bps: best,
        burst_bytes: nominal.map_or(0.0, netns_burst),
        latency_s: pick("rtt_s") / 2.0,
        hosts: Hosts::Shared {
            cores: default_threads() as f64 * share,
        },
        cpu: Cpu {
            message_s: pick("message_s"),
            link_byte_s: link_cpu / 2.0 + pick("relay_extra_byte_s"),
            gf_byte_s: pick("gf_byte_s"),
            read_byte_s: pick("read_byte_s"),
            write_byte_s: pick("write_byte_s"),
            store_byte_s: pick("store_byte_s"),
            chain_block_s: pick("chain_block_s"),
            ..reference.cpu
        },
        detect_s: liveness.as_secs_f64(),
        ..reference
    };
    machine.validate()?;
    Ok(machine)
}

/// Bytes of each rank's image in the control plane's runs: a few pages, so that an epoch's
/// time is the control plane's (`eckpt bench control`'s default).
const CONTROL_IMAGE: u64 = 16 << 10;

/// The control plane's costs as `eckpt bench control` measures them — an epoch's commit, the
/// coordinator's and the nodes' CPU per epoch, a killed node's detection, the recovery's
/// planning — on two clusters of tiny images with `file`'s coding and time bounds, started on
/// this host for the purpose: the calibrated cluster's own epochs belong to its job, and its
/// nodes are not killed to time a detection. The sizes, 128 nodes (or one group of `k + m`,
/// if larger) and four times as many (at most 1,024), take seconds, and the larger is as
/// near as that allows to the thousands of nodes predicted: on one host the nodes' CPU per
/// node grows with their number (1.25 ms per epoch at 64 nodes, 2.7 ms at 1,024 here).
fn measure_control(file: &ClusterFile, samples: &mut Samples) -> Result<Vec<ControlRun>> {
    let coding = file.coding;
    let small = (coding.k + coding.m).max(128);
    [small, (4 * small).min(1024)]
        .into_iter()
        .map(|nodes| {
            let r = control::bench(&control::Options {
                nodes,
                coding,
                size_per_node: CONTROL_IMAGE,
                epochs: 11,
                rest: 0.0,
                kill: 1,
                restart_threads: 8,
                per_process: 1024,
                deadlines: file.deadlines,
                dir: None,
            })
            .with_context(|| format!("measuring the control plane at {nodes} nodes"))?;
            let (coordinator_cpu_s, nodes_cpu_s) = r.mean_cpu_seconds_per_epoch();
            let run = ControlRun {
                scenario: Scenario {
                    nodes,
                    coding,
                    size_per_node: CONTROL_IMAGE,
                    // The MAT pattern of bench control changes at least one page of each image.
                    dirty_fraction: 4096.0 / CONTROL_IMAGE as f64,
                },
                commit_s: r.commit_seconds,
                coordinator_cpu_s,
                nodes_cpu_s,
                detect_s: r.detect_seconds.context("no detection measured")?,
                plan_s: r
                    .recover_plan_and_commit_seconds
                    .context("no recovery measured")?,
            };
            for (name, value) in [
                ("control_nodes", nodes as f64),
                ("control_commit_s", run.commit_s),
                ("control_coordinator_cpu_s", run.coordinator_cpu_s),
                ("control_nodes_cpu_s", run.nodes_cpu_s),
                ("control_detect_s", run.detect_s),
                ("control_plan_s", run.plan_s),
            ] {
                push(samples, name, value);
            }
            Ok(run)
        })
        .collect()
}

/// Seconds per byte of `work` over `bytes`, median of five.
fn per_byte(bytes: usize, mut work: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    work()?;
    (0..5)
        .map(|_| {
            let t = Instant::now();
            work()?;
            Ok(t.elapsed().as_secs_f64() / bytes as f64)
        })
        .collect()
}

/// The costs of the agents' code paths, in this process: GF arithmetic, checksummed reads
/// and writes of a 64 MiB file next to the agent's store in 1 MiB chunks, hashing, and
/// messages through queues.
fn measure_local(near: &Path, samples: &mut Samples) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    const FILE: usize = 64 << 20;
    let input: Vec<u8> = (0..CHUNK).map(|i| (i * 31 % 251) as u8).collect();
    let mut outs = vec![vec![0u8; CHUNK]; 2];
    let map = LinearMap::new(2, 1, vec![3, 7])?;
    samples.insert(
        "gf_byte_s".into(),
        per_byte(2 * CHUNK * 16, || {
            for _ in 0..16 {
                let mut slices: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                map.accumulate(0, &input, &mut slices)?;
            }
            Ok(())
        })?,
    );
    let path = near.join(format!("calibrate-{}.tmp", std::process::id()));
    let result = file_costs(&path, &input, FILE, samples);
    let _ = std::fs::remove_file(&path);
    result?;
    let image = vec![0x5au8; FILE];
    samples.insert(
        "hash_byte_s".into(),
        per_byte(FILE, || {
            std::hint::black_box(
                image
                    .chunks(64 << 10)
                    .map(xxhash_rust::xxh3::xxh3_64)
                    .sum::<u64>(),
            );
            Ok(())
        })?,
    );
    message_costs(samples)?;
    connection_costs(samples)?;
    let store = near.join(format!("calibrate-store-{}", std::process::id()));
    let result = chain_costs(&store, samples);
    let _ = std::fs::remove_dir_all(&store);
    result
}

/// Writes `size` bytes to `path` in chunks of `chunk.len()` and syncs, then reads them back
/// with a CRC per chunk, as the agents write parity and read data chunks.
fn file_costs(
    path: &Path,
    chunk: &[u8],
    size: usize,
    samples: &mut BTreeMap<String, Vec<f64>>,
) -> Result<()> {
    let file: File = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let write = per_byte(size, || {
        for at in (0..size).step_by(chunk.len()) {
            file.write_all_at(chunk, at as u64)?;
        }
        file.sync_all()?;
        Ok(())
    })?;
    let mut buf = vec![0u8; chunk.len()];
    let read = per_byte(size, || {
        for at in (0..size).step_by(chunk.len()) {
            file.read_exact_at(&mut buf, at as u64)?;
            std::hint::black_box(crc32c::crc32c(&buf));
        }
        Ok(())
    })?;
    samples.insert("write_byte_s".into(), write);
    samples.insert("read_byte_s".into(), read);
    let _ = (&file).flush();
    Ok(())
}

/// A rank's checkpoint into a store next to the agents' (seconds per byte of a 32 MiB full
/// epoch written and committed), and the CPU seconds per stored block of opening an epoch
/// (its manifest and its parent's, checked), as the agents do several times per encode and
/// update: the image, then an epoch that changed one page.
fn chain_costs(root: &Path, samples: &mut Samples) -> Result<()> {
    const IMAGE: usize = 32 << 20;
    let store = eckpt_store::Store::open(root)?;
    let mut image = vec![0x5au8; IMAGE];
    for epoch in 1..=2u64 {
        image[IMAGE / 2] = epoch as u8;
        let started = Instant::now();
        let mut writer = store.writer(0, epoch)?;
        writer.put_full("image", &image)?;
        writer.commit()?;
        if epoch == 1 {
            push(
                samples,
                "store_byte_s",
                started.elapsed().as_secs_f64() / IMAGE as f64,
            );
        }
    }
    let blocks = IMAGE.div_ceil(store.options().block_size as usize);
    let per_block = per_byte(blocks, || {
        for _ in 0..4 {
            std::hint::black_box(store.view(0, 2)?);
        }
        Ok(())
    })?;
    samples.insert(
        "chain_block_s".into(),
        per_block.into_iter().map(|s| s / 4.0).collect(),
    );
    Ok(())
}

/// CPU seconds per end of an authenticated TCP connection (connect or accept, the HMAC
/// handshake both ways, the close), as every task opens several: the coordinator's calls
/// and the links between members. Loopback in this process, 200 connections, three times.
fn connection_costs(samples: &mut Samples) -> Result<()> {
    const CONNECTIONS: usize = 200;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let secret = ClusterSecret::generate()?;
    let listener = rt.block_on(listen(
        &Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 0,
        },
        &secret,
    ))?;
    let endpoint = listener.local_endpoint().clone();
    for _ in 0..3 {
        let before = cpu_seconds(std::process::id())?;
        rt.block_on(async {
            for _ in 0..CONNECTIONS {
                let accept = async { listener.accept().await?.authenticate().await };
                let (a, b) = tokio::try_join!(connect(&endpoint, &secret), accept)?;
                drop((a, b));
            }
            Ok::<_, eckpt_proto::ProtoError>(())
        })?;
        let after = cpu_seconds(std::process::id())?;
        push(
            samples,
            "connection_s",
            (after - before) / CONNECTIONS as f64 / 2.0,
        );
    }
    Ok(())
}

/// CPU seconds of this process per message of `payload` bytes taking the path of a
/// task's messages in an agent: from a blocking thread through a bounded queue to a writer
/// task, as authenticated frames over a Unix socket, to a reader task that receives each
/// into a fresh buffer, through a bounded queue to a blocking consumer.
fn relay_cpu(messages: usize, payload: usize) -> Result<f64> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let secret = ClusterSecret::generate()?;
    let path = std::env::temp_dir().join(format!(
        "eckpt-calibrate-{}-{:016x}.sock",
        std::process::id(),
        rand::random::<u64>()
    ));
    let endpoint = Endpoint::Unix(path.clone());
    let (out, inp) = rt.block_on(async {
        let listener = listen(&endpoint, &secret).await?;
        let accept = async { listener.accept().await?.authenticate().await };
        tokio::try_join!(connect(&endpoint, &secret), accept)
    })?;
    let _ = std::fs::remove_file(&path);
    let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(3);
    let (in_tx, mut in_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(3);
    let (_, mut writer) = out.into_split();
    let (mut reader, _) = inp.into_split();
    let writing = rt.spawn(async move {
        while let Some(m) = out_rx.recv().await {
            writer.send_data(&m).await?;
        }
        Ok::<_, eckpt_proto::ProtoError>(())
    });
    let reading = rt.spawn(async move {
        loop {
            let mut buf = Vec::new();
            reader.recv_data(&mut buf).await?;
            if buf.is_empty() || in_tx.send(buf).await.is_err() {
                return Ok::<_, eckpt_proto::ProtoError>(());
            }
        }
    });
    let before = cpu_seconds(std::process::id())?;
    let consumer = std::thread::spawn(move || while in_rx.blocking_recv().is_some() {});
    let message = vec![0x5au8; payload];
    for _ in 0..messages {
        out_tx.blocking_send(message.clone())?;
    }
    out_tx.blocking_send(Vec::new())?;
    drop(out_tx);
    consumer
        .join()
        .map_err(|_| anyhow::anyhow!("relay consumer panicked"))?;
    rt.block_on(writing)??;
    rt.block_on(reading)??;
    Ok((cpu_seconds(std::process::id())? - before) / messages as f64)
}

/// Per-message CPU (each end) and the relay's extra CPU per byte beyond streaming frames
/// (each end): the queues, fresh receive buffers and wake-ups of an agent's links, which a
/// `LinkTest` (reused buffers, no queues) does not pay.
fn message_costs(samples: &mut Samples) -> Result<()> {
    const SMALL: usize = 64;
    const LARGE: usize = 256 << 10;
    for _ in 0..3 {
        let small = relay_cpu(20_000, SMALL)?;
        let large = relay_cpu(2_000, LARGE)?;
        let before = cpu_seconds(std::process::id())?;
        bench_transport(TransportKind::Unix, 2_000 * LARGE as u64, LARGE)?;
        let streamed = (cpu_seconds(std::process::id())? - before) / 2_000.0;
        push(samples, "message_s", small / 2.0);
        let extra = (large - small - streamed) / LARGE as f64 / 2.0;
        push(samples, "relay_extra_byte_s", extra.max(0.0));
    }
    Ok(())
}
