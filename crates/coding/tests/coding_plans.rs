//! Every topology and layout, encode and decode, run by one thread per participant over
//! channels, against the codec applied directly to each row (the independent reference).

use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use eckpt_codec::{Code, CodeKind};
use eckpt_coding::exec::{run_participant, Chunks, ExecOptions, Links};
use eckpt_coding::geometry::Geometry;
use eckpt_coding::plan::{CodingPlan, Input, Output, Work};
use eckpt_coding::{CodingError, Layout, Topology};
use proptest::prelude::*;

struct ChannelLinks {
    to: HashMap<usize, SyncSender<Vec<u8>>>,
    from: HashMap<usize, Receiver<Vec<u8>>>,
    /// Buffers the participant gave back, handed out again dirty (as an agent's links
    /// reuse them): a participant that counted on a reused buffer being zero would code
    /// garbage, and the checks against the reference would fail.
    given: Vec<Vec<u8>>,
}

impl Links<CodingError> for ChannelLinks {
    fn send(&mut self, to: usize, message: Vec<u8>) -> Result<(), CodingError> {
        self.to[&to]
            .send(message)
            .map_err(|_| CodingError::Protocol(format!("participant {to} hung up")))
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>, CodingError> {
        self.from[&from]
            .recv()
            .map_err(|_| CodingError::Protocol(format!("participant {from} hung up")))
    }
    fn capacity(&self) -> usize {
        LINK_CAPACITY
    }
    fn take_buffer(&mut self) -> Option<Vec<u8>> {
        self.given.pop()
    }
    fn give_buffer(&mut self, mut buffer: Vec<u8>) {
        buffer.fill(0xA5);
        // Sometimes a little longer or shorter than it was.
        let len = buffer.len();
        buffer.resize(if len.is_multiple_of(2) { len + 3 } else { len / 2 }, 0x5A);
        self.given.push(buffer);
    }
}

/// Messages a test link queues before its sender blocks: targets receive their outputs up
/// to this many rows late, so the tests run the deferred deliveries too — and would hang,
/// not pass, if the executor deferred more than a link can hold.
const LINK_CAPACITY: usize = 2;

/// A participant's shards in memory, and what it was given to keep.
#[derive(Default, Clone)]
struct Memory {
    chunk: usize,
    data: Vec<u8>,
    parity: Vec<u8>,
    outputs: HashMap<(usize, u64), Vec<u8>>,
}

impl Chunks<CodingError> for Memory {
    fn read(&mut self, input: Input, buf: &mut [u8]) -> Result<(), CodingError> {
        let (bytes, n) = match input {
            Input::Data(n) => (&self.data, n),
            Input::Parity(n) => (&self.parity, n),
        };
        let at = n as usize * self.chunk;
        buf.copy_from_slice(&bytes[at..at + self.chunk]);
        Ok(())
    }
    fn write(&mut self, output: &Output, data: &[u8]) -> Result<(), CodingError> {
        assert!(
            self.outputs
                .insert((output.stream, output.chunk), data.to_vec())
                .is_none(),
            "output written twice"
        );
        Ok(())
    }
}

/// Runs one task with `participants` threads, each multiplying on `threads` threads of the
/// codec's pool; returns each participant's memory.
fn run(
    geometry: &Geometry,
    code: &Code,
    members: &[Option<usize>],
    (work, topology, threads): (Work, Topology, usize),
    memories: Vec<Memory>,
) -> Vec<Memory> {
    let n = memories.len();
    let mut senders: Vec<HashMap<usize, SyncSender<Vec<u8>>>> = (0..n).map(|_| HashMap::new()).collect();
    let mut receivers: Vec<HashMap<usize, Receiver<Vec<u8>>>> = (0..n).map(|_| HashMap::new()).collect();
    for (a, to) in senders.iter_mut().enumerate() {
        for (b, from) in receivers.iter_mut().enumerate() {
            let (tx, rx) = sync_channel(LINK_CAPACITY);
            to.insert(b, tx);
            from.insert(a, rx);
        }
    }
    let chunk = memories[0].chunk;
    std::thread::scope(|scope| {
        let handles: Vec<_> = memories
            .into_iter()
            .zip(senders.into_iter().zip(receivers))
            .enumerate()
            .map(|(me, (mut memory, (to, from)))| {
                let mut plan =
                    CodingPlan::new(geometry.clone(), code.clone(), members.to_vec(), work.clone()).unwrap();
                scope.spawn(move || {
                    let mut links = ChannelLinks {
                        to,
                        from,
                        given: Vec::new(),
                    };
                    run_participant(
                        me,
                        &mut plan,
                        topology,
                        ExecOptions { chunk, threads },
                        &mut links,
                        &mut memory,
                        &mut |_, _| {},
                    )
                    .unwrap();
                    memory
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Small chunks on one thread: many rows, every shape.
const SMALL: Cut = Cut {
    chunk: 192,
    threads: 1,
};

/// Chunks and threads of a check.
#[derive(Clone, Copy)]
struct Cut {
    chunk: usize,
    threads: usize,
}

fn check(
    layout: Layout,
    (topology, Cut { chunk, threads }): (Topology, Cut),
    k: usize,
    m: usize,
    chunks: u64,
    lost: Vec<usize>,
    targets: Vec<usize>,
) {
    let n = k + m;
    let geometry = Geometry::new(layout, k, m, chunks);
    let code = Code::new(CodeKind::Cauchy, k, m).unwrap();
    let members: Vec<Option<usize>> = (0..n).map(Some).collect();
    // Two extra participants that hold nothing: spares receiving rebuilt shards.
    let memories: Vec<Memory> = (0..n + 2)
        .map(|p| Memory {
            chunk,
            data: if p < n {
                random_bytes(geometry.data_chunks(p) as usize * chunk, p as u64 + 1)
            } else {
                Vec::new()
            },
            ..Memory::default()
        })
        .collect();

    let encoded = run(
        &geometry,
        &code,
        &members,
        (Work::Encode, topology, threads),
        memories,
    );
    // Reference: the codec over each row's data chunks.
    for row in 0..geometry.rows() {
        let data: Vec<&[u8]> = (0..k)
            .map(|l| {
                let h = geometry.holder(row, l);
                let at = geometry.data_chunk(row, h).unwrap() as usize * chunk;
                &encoded[h].data[at..at + chunk]
            })
            .collect();
        let mut parity = vec![vec![0u8; chunk]; m];
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        code.encode(&data, &mut outs).unwrap();
        for (i, expected) in parity.iter().enumerate() {
            let h = geometry.holder(row, k + i);
            let got = &encoded[h].outputs[&(h, geometry.parity_chunk(row, h).unwrap())];
            assert_eq!(got, expected, "{layout} {topology} row {row} parity {i}");
        }
    }

    // Parity files as the holders would keep them, then lose members and rebuild.
    let with_parity: Vec<Memory> = encoded
        .iter()
        .enumerate()
        .map(|(p, mem)| {
            let mut parity = vec![
                0u8;
                if p < n {
                    geometry.parity_chunks(p) as usize * chunk
                } else {
                    0
                }
            ];
            for ((stream, c), bytes) in &mem.outputs {
                assert_eq!(*stream, p);
                parity[*c as usize * chunk..(*c as usize + 1) * chunk].copy_from_slice(bytes);
            }
            Memory {
                chunk,
                data: mem.data.clone(),
                parity,
                outputs: HashMap::new(),
            }
        })
        .collect();
    let rebuild: Vec<(usize, usize)> = lost
        .iter()
        .zip(&targets)
        .filter(|(l, _)| geometry.holds_data(**l))
        .map(|(&l, &t)| (l, t))
        .collect();
    if rebuild.is_empty() {
        return;
    }
    let mut members = members;
    for &l in &lost {
        members[l] = None;
    }
    let work = Work::Decode {
        unavailable: lost.clone(),
        rebuild: rebuild.clone(),
    };
    let decoded = run(&geometry, &code, &members, (work, topology, threads), with_parity);
    for (member, target) in rebuild {
        for q in 0..geometry.data_chunks(member) {
            let got = &decoded[target].outputs[&(member, q)];
            let at = q as usize * chunk;
            assert_eq!(
                got,
                &encoded[member].data[at..at + chunk],
                "{layout} {topology} member {member} chunk {q} rebuilt at {target}"
            );
        }
    }
}

#[test]
fn each_topology_and_layout_encodes_and_decodes() {
    for layout in [Layout::Dedicated, Layout::Rotated] {
        for topology in Topology::ALL {
            // Rebuild at a spare and at a survivor that is itself a source.
            check(layout, (*topology, SMALL), 4, 2, 9, vec![1, 3], vec![6, 0]);
            check(layout, (*topology, SMALL), 3, 1, 4, vec![2], vec![2 + 1]);
        }
    }
}

/// Chunks long enough to be cut into byte ranges over three threads (and not a multiple of
/// the ranges' alignment): every topology still codes what the reference does.
#[test]
fn chunks_multiplied_on_several_threads_code_the_same() {
    let cut = Cut {
        chunk: 3 * 64 * 1024 + 40,
        threads: 3,
    };
    for layout in [Layout::Dedicated, Layout::Rotated] {
        for topology in Topology::ALL {
            check(layout, (*topology, cut), 4, 2, 3, vec![0, 5], vec![6, 2]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_shapes_and_losses(
        rotated in any::<bool>(),
        topology in 0..4usize,
        k in 1usize..7,
        m in 1usize..4,
        chunks in 0u64..12,
        seed in any::<u64>(),
    ) {
        let n = k + m;
        let layout = if rotated { Layout::Rotated } else { Layout::Dedicated };
        // Lose up to m members; rebuild each at a spare or a random survivor.
        let mut order: Vec<usize> = (0..n).collect();
        let mut x = seed | 1;
        for i in (1..n).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let losses = 1 + (seed as usize >> 8) % m;
        let lost: Vec<usize> = order[..losses].to_vec();
        let survivors: Vec<usize> = order[losses..].to_vec();
        let targets: Vec<usize> = lost
            .iter()
            .enumerate()
            .map(|(i, _)| if (seed >> (16 + i)) & 1 == 1 { n + i % 2 } else { survivors[i % survivors.len()] })
            .collect();
        check(layout, (Topology::ALL[topology], SMALL), k, m, chunks, lost, targets);
    }
}
