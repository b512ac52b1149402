//! The faults of a simulated run, drawn from its seed before it starts: hosts restarted
//! (a crash, its disk kept) or lost (crashed for good, its disk gone), links cut (packets
//! refused) or stalled (packets held, then delivered), hosts frozen (every link of theirs
//! stalled), each for a while; freezes of the coordinator that strike as it plans a
//! recovery, the moment when a stall once left a group without its parity; the coordinator
//! cut off from everyone past its partition grace, after which it once declared lost every
//! node that was on its way back; hosts whose code and clock stop (SIGSTOP), as a
//! coordinator stopped mid-recovery once reported redundancy restored without the parity;
//! bits that flip
//! in what a node stores (rot its disk does not report); and writes torn by a crash — a
//! node's stored file that loses its tail though its disk said it was written, the
//! coordinator's journal log ending in half a record.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The host crashes and starts again after `down`, its disk as the crash left it.
    Restart {
        /// The host.
        host: String,
        /// How long it stays down.
        down: Duration,
    },
    /// The node crashes for good and its local storage is gone.
    Lose {
        /// The node.
        node: String,
    },
    /// Packets between `a` and `b` are refused for `lasting`.
    Cut {
        /// One end.
        a: String,
        /// The other end.
        b: String,
        /// How long.
        lasting: Duration,
    },
    /// Packets between `a` and `b` are held for `lasting`, then delivered.
    Stall {
        /// One end.
        a: String,
        /// The other end.
        b: String,
        /// How long.
        lasting: Duration,
    },
    /// Every packet to and from `host` is held for `lasting`, then delivered: what the
    /// others see of a host stopped (SIGSTOP) or starved, though its own timers run on.
    /// A link of a frozen host stays held through the heal of any other fault on it.
    Freeze {
        /// The host.
        host: String,
        /// How long.
        lasting: Duration,
    },
    /// The host's code and clock stop for `lasting`, as SIGSTOP (or a hypervisor pausing
    /// its VM) stops a process, while its kernel still takes packets (turmoil's
    /// `Sim::stop`, vendor/turmoil). Then it runs again and finds its clock jumped, what
    /// arrived meanwhile waiting and every timer due at once. A frozen host is seen the same
    /// way from outside, but its own timers run through the freeze.
    Stop {
        /// The host.
        host: String,
        /// How long.
        lasting: Duration,
    },
    /// The coordinator is cut off from every node and from the job for `lasting`, longer
    /// than its liveness period and partition grace together: its links held, as when its
    /// host's network goes down while TCP retransmits. The nodes run on, none of them out
    /// of reach on its own side: the coordinator's silence must cost none of them.
    Isolate {
        /// How long.
        lasting: Duration,
    },
    /// One bit flips in a file the node stores bulk data in — a rank's epoch or a coded
    /// object — chosen by `pick` among them when it strikes: what a disk that returns
    /// wrong bytes without an error does. The node stays up and counts against the run's
    /// loss budget, as a lost one does: its group has one member fewer it can trust.
    Flip {
        /// The node.
        node: String,
        /// Which file, byte and bit (`disk::flip`).
        pick: u64,
    },
    /// The node crashes, and a file it stores a checkpoint in — a rank's epoch or a coded
    /// object, data or description — loses its tail: a write its disk acknowledged and did
    /// not keep (an `fsync` that lied). It starts again after `down`, and counts against
    /// the loss budget as a flip does.
    Tear {
        /// The node.
        node: String,
        /// Which file, and how much of it is kept (`disk::tear`).
        pick: u64,
        /// How long it stays down.
        down: Duration,
    },
    /// As the coordinator crashes, one of its journal's two logs is left ending in half a
    /// record: one being appended, or the last one of that log half lost (`disk::tear_log`).
    /// Struck with a crash of the coordinator; the other log is whole, so nothing is lost.
    TearLog {
        /// Which log, which way, and where the record is cut.
        pick: u64,
    },
}

impl Fault {
    /// The fault's kind, for counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Restart { .. } => "restart",
            Fault::Lose { .. } => "lose",
            Fault::Cut { .. } => "cut",
            Fault::Stall { .. } => "stall",
            Fault::Freeze { .. } => "freeze",
            Fault::Stop { .. } => "stop",
            Fault::Isolate { .. } => "isolation",
            Fault::Flip { .. } => "flip",
            Fault::Tear { .. } => "tear",
            Fault::TearLog { .. } => "torn log",
        }
    }
}

/// What faults a run draws.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Faults are injected from this virtual time on…
    pub from: Duration,
    /// …for this long; after it every fault is healed.
    pub window: Duration,
    /// How many.
    pub count: usize,
    /// How many nodes may be lost for good in a run (at most `m`, so that every committed
    /// epoch stays restorable).
    pub losses: usize,
    /// The longest a fault lasts.
    pub longest: Duration,
    /// At most how many of the coordinator's recoveries within the window are struck by a
    /// freeze of the coordinator ([`recovery_freezes`]).
    pub recovery_freezes: usize,
    /// Blips beside those faults ([`blips`]): how many, each lasting at most
    /// `blip_longest`.
    pub blips: usize,
    /// The longest a blip lasts.
    pub blip_longest: Duration,
    /// One run in `isolations` cuts the coordinator off from everyone for a while of
    /// `isolation` ([`isolations`]); none when 0.
    pub isolations: u32,
    /// The shortest and the longest such a cut lasts.
    pub isolation: (Duration, Duration),
    /// One run in `stops` stops hosts' code and clocks ([`stops`]); none when 0.
    pub stops: u32,
    /// The shortest and the longest a stop lasts.
    pub stop: (Duration, Duration),
}

/// A freeze of the coordinator that strikes `after` it plans a recovery, for `lasting`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryFreeze {
    /// From the recovery's plan to the freeze: somewhere in its decode, its encode or its
    /// commit.
    pub after: Duration,
    /// How long.
    pub lasting: Duration,
}

/// The freezes that strike the first recoveries of the run of `seed`, in order: up to
/// `plan.recovery_freezes` of them, each beginning up to 150 ms after its recovery's plan
/// (a recovery's decode and encode take tens of milliseconds here).
pub fn recovery_freezes(seed: u64, plan: &FaultPlan) -> Vec<RecoveryFreeze> {
    // Another stream than the schedule's (same seed), so that either can change alone.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0F4E_E2E5);
    let longest_ms = plan.longest.as_millis().max(2) as u64;
    (0..rng.random_range(0..=plan.recovery_freezes))
        .map(|_| RecoveryFreeze {
            after: Duration::from_millis(rng.random_range(0..150)),
            lasting: Duration::from_millis(rng.random_range(1..longest_ms)),
        })
        .collect()
}

/// The coordinator's isolation in the run of `seed`, if it draws one (one run in
/// `plan.isolations`): it begins in the window and ends by the time every other fault has
/// healed (`plan.from + plan.window + plan.longest`). A stream of its own: a run without
/// one is the run it was before isolations existed.
pub fn isolations(seed: u64, plan: &FaultPlan) -> Vec<(Duration, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x1501_A7ED);
    if plan.isolations == 0 || rng.random_range(0..plan.isolations) != 0 {
        return Vec::new();
    }
    let (shortest, longest) = (
        plan.isolation.0.as_millis() as u64,
        plan.isolation.1.as_millis() as u64,
    );
    let lasting = Duration::from_millis(rng.random_range(shortest..longest.max(shortest + 1)));
    let room = (plan.window + plan.longest)
        .saturating_sub(lasting)
        .as_millis()
        .max(1) as u64;
    let at = plan.from + Duration::from_millis(rng.random_range(0..room));
    vec![(at, Fault::Isolate { lasting })]
}

/// The stops of a run ([`stops`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stops {
    /// Stops at times of the window.
    pub scheduled: Vec<(Duration, Fault)>,
    /// Stops of the coordinator that strike its first recoveries, in order, each up to
    /// 150 ms after its recovery's plan: between a recovery's encode and its commit, where
    /// a stopped coordinator once reported redundancy restored without the parity.
    pub in_recoveries: Vec<RecoveryFreeze>,
}

/// The stops of the run of `seed`, if it draws them (one run in `plan.stops`): one to three
/// in the window, each of the coordinator (one in two) or of any of `hosts`, and up to
/// `plan.recovery_freezes` stops of the coordinator's recoveries, each lasting within
/// `plan.stop` and over by the time every other fault has healed. A stream of its own: a
/// run without them is the run it was before stops existed.
pub fn stops(seed: u64, plan: &FaultPlan, coordinator: &str, hosts: &[String]) -> Stops {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5709_5709);
    if plan.stops == 0 || rng.random_range(0..plan.stops) != 0 {
        return Stops::default();
    }
    let (shortest, longest) = (plan.stop.0.as_millis() as u64, plan.stop.1.as_millis() as u64);
    let lasting =
        |rng: &mut ChaCha8Rng| Duration::from_millis(rng.random_range(shortest..longest.max(shortest + 1)));
    let scheduled = (0..rng.random_range(1..=3))
        .map(|_| {
            let host = match rng.random_range(0..2) {
                0 => coordinator.to_string(),
                _ => hosts[rng.random_range(0..hosts.len())].clone(),
            };
            let lasting = lasting(&mut rng);
            let room = (plan.window + plan.longest)
                .saturating_sub(lasting)
                .as_millis()
                .max(1) as u64;
            let at = plan.from + Duration::from_millis(rng.random_range(0..room));
            (at, Fault::Stop { host, lasting })
        })
        .collect();
    let in_recoveries = (0..rng.random_range(0..=plan.recovery_freezes))
        .map(|_| RecoveryFreeze {
            after: Duration::from_millis(rng.random_range(0..150)),
            lasting: lasting(&mut rng),
        })
        .collect();
    Stops {
        scheduled,
        in_recoveries,
    }
}

/// Bit flips in the stores of the run of `seed`: as many as the loss budget left after
/// `faults` (one flip per node, never a node lost, each with a chance of one in two). Each
/// strikes at a time of the window, or (`None`, one in three) once the job has stopped and
/// before it reads its images back — rot while nothing runs, which no later checkpoint
/// overwrites. A stream of their own, so that adding them changed no other fault of a seed.
pub fn disk_flips(
    seed: u64,
    plan: &FaultPlan,
    faults: &[(Duration, Fault)],
    nodes: &[String],
) -> Vec<(Option<Duration>, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xD15C_F11B);
    let mut spared: Vec<&String> = nodes
        .iter()
        .filter(|n| {
            !faults
                .iter()
                .any(|(_, f)| matches!(f, Fault::Lose { node } if node == *n))
        })
        .collect();
    let budget = plan.losses.saturating_sub(nodes.len() - spared.len());
    let window_ms = plan.window.as_millis().max(1) as u64;
    let mut flips = Vec::new();
    for _ in 0..budget {
        if spared.is_empty() || rng.random_range(0..2) == 0 {
            continue;
        }
        let node = spared.remove(rng.random_range(0..spared.len())).clone();
        let in_window = plan.from + Duration::from_millis(rng.random_range(0..window_ms));
        let at = (rng.random_range(0..3) != 0).then_some(in_window);
        flips.push((
            at,
            Fault::Flip {
                node,
                pick: rng.random(),
            },
        ));
    }
    flips
}

/// Torn writes in the stores of the run of `seed`: as many as the loss budget left after
/// `faults` (losses and flips; one per node, never a node lost or flipped, each with a
/// chance of one in two), each with a crash of its node at a time of the window.
pub fn disk_tears(
    seed: u64,
    plan: &FaultPlan,
    faults: &[(Duration, Fault)],
    nodes: &[String],
) -> Vec<(Duration, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7EA2_D15C);
    let mut spared: Vec<&String> = nodes
        .iter()
        .filter(|n| {
            !faults
                .iter()
                .any(|(_, f)| matches!(f, Fault::Lose { node } | Fault::Flip { node, .. } if node == *n))
        })
        .collect();
    let budget = plan.losses.saturating_sub(nodes.len() - spared.len());
    let window_ms = plan.window.as_millis().max(1) as u64;
    let longest_ms = plan.longest.as_millis().max(2) as u64;
    let mut tears = Vec::new();
    for _ in 0..budget {
        if spared.is_empty() || rng.random_range(0..2) == 0 {
            continue;
        }
        let node = spared.remove(rng.random_range(0..spared.len())).clone();
        let at = plan.from + Duration::from_millis(rng.random_range(0..window_ms));
        tears.push((
            at,
            Fault::Tear {
                node,
                pick: rng.random(),
                down: Duration::from_millis(rng.random_range(1..longest_ms)),
            },
        ));
    }
    tears
}

/// The journal's logs torn by the coordinator's crashes in `faults` (those of host
/// `coordinator`), each crash with a chance of one in two: the tear strikes as it crashes.
pub fn log_tears(seed: u64, faults: &[(Duration, Fault)], coordinator: &str) -> Vec<(Duration, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7EA2_1065);
    faults
        .iter()
        .filter(|(_, f)| matches!(f, Fault::Restart { host, .. } if host == coordinator))
        .filter_map(|(at, _)| {
            let pick: u64 = rng.random();
            (rng.random_range(0..2) == 1).then_some((*at, Fault::TearLog { pick }))
        })
        .collect()
}

/// Blips of the run of `seed` among `hosts`, at times of the window: `plan.blips` short
/// faults — hosts restarted, links cut or stalled, hosts frozen — each for at most
/// `plan.blip_longest`, what a flaky network and busy hosts do all day. A stream of its
/// own: a run without blips is the run it was before they existed.
pub fn blips(seed: u64, plan: &FaultPlan, hosts: &[String]) -> Vec<(Duration, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xB11F_5EED);
    let window_ms = plan.window.as_millis().max(1) as u64;
    let longest_ms = plan.blip_longest.as_millis().max(2) as u64;
    (0..plan.blips)
        .map(|_| {
            let at = plan.from + Duration::from_millis(rng.random_range(0..window_ms));
            let lasting = Duration::from_millis(rng.random_range(1..longest_ms));
            let host = hosts[rng.random_range(0..hosts.len())].clone();
            let fault = match rng.random_range(0..8u32) {
                0 => Fault::Restart { host, down: lasting },
                1..=3 => {
                    let (a, b) = two(&mut rng, hosts);
                    Fault::Cut { a, b, lasting }
                }
                4..=5 => {
                    let (a, b) = two(&mut rng, hosts);
                    Fault::Stall { a, b, lasting }
                }
                _ => Fault::Freeze { host, lasting },
            };
            (at, fault)
        })
        .collect()
}

/// The faults of the run of `seed`, by the virtual time they begin: hosts are `hosts`
/// (the coordinator's among them), nodes that may be lost are `nodes`.
pub fn draw(seed: u64, plan: &FaultPlan, hosts: &[String], nodes: &[String]) -> Vec<(Duration, Fault)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut faults = Vec::new();
    let mut lost = Vec::new();
    let window_ms = plan.window.as_millis().max(1) as u64;
    let longest_ms = plan.longest.as_millis().max(2) as u64;
    for _ in 0..plan.count {
        let at = plan.from + Duration::from_millis(rng.random_range(0..window_ms));
        let lasting = Duration::from_millis(rng.random_range(1..longest_ms));
        let pick = |rng: &mut ChaCha8Rng, from: &[String]| from[rng.random_range(0..from.len())].clone();
        let fault = match rng.random_range(0..12u32) {
            0..=2 => Fault::Restart {
                host: pick(&mut rng, hosts),
                down: lasting,
            },
            3 if lost.len() < plan.losses => {
                let left: Vec<String> = nodes.iter().filter(|n| !lost.contains(*n)).cloned().collect();
                let node = pick(&mut rng, &left);
                lost.push(node.clone());
                Fault::Lose { node }
            }
            3..=6 => {
                let (a, b) = two(&mut rng, hosts);
                Fault::Cut { a, b, lasting }
            }
            7..=9 => {
                let (a, b) = two(&mut rng, hosts);
                Fault::Stall { a, b, lasting }
            }
            _ => Fault::Freeze {
                host: pick(&mut rng, hosts),
                lasting,
            },
        };
        faults.push((at, fault));
    }
    faults.sort_by_key(|(at, _)| *at);
    faults
}

/// Two different hosts of `hosts`.
fn two(rng: &mut ChaCha8Rng, hosts: &[String]) -> (String, String) {
    let a = rng.random_range(0..hosts.len());
    let b = (a + 1 + rng.random_range(0..hosts.len() - 1)) % hosts.len();
    (hosts[a].clone(), hosts[b].clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Faults by kind.
    fn by_kind(faults: &[(Duration, Fault)]) -> BTreeMap<&'static str, u64> {
        let mut counts = BTreeMap::new();
        for (_, fault) in faults {
            *counts.entry(fault.kind()).or_default() += 1;
        }
        counts
    }

    /// Faults from 1 s on for `seconds`, `count` of them lasting up to 3 s, two losses, up
    /// to `recovery_freezes` freezes of recoveries, no blips.
    fn window(seconds: u64, count: usize, recovery_freezes: usize) -> FaultPlan {
        FaultPlan {
            from: Duration::from_secs(1),
            window: Duration::from_secs(seconds),
            count,
            losses: 2,
            longest: Duration::from_secs(3),
            recovery_freezes,
            blips: 0,
            blip_longest: Duration::ZERO,
            isolations: 0,
            isolation: (Duration::ZERO, Duration::ZERO),
            stops: 0,
            stop: (Duration::ZERO, Duration::ZERO),
        }
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn a_seed_draws_one_schedule_within_the_window_and_the_loss_budget() {
        let plan = window(10, 200, 2);
        let (hosts, nodes) = (names("h", 5), names("n", 4));
        let faults = draw(9, &plan, &hosts, &nodes);
        assert_eq!(faults, draw(9, &plan, &hosts, &nodes));
        assert_ne!(faults, draw(10, &plan, &hosts, &nodes));
        assert_eq!(faults.len(), 200);
        assert!(faults.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(faults
            .iter()
            .all(|(at, _)| *at >= plan.from && *at < plan.from + plan.window));
        let lost: Vec<_> = faults.iter().filter(|(_, f)| f.kind() == "lose").collect();
        assert_eq!(lost.len(), 2, "{lost:?}");
        for (_, fault) in &faults {
            if let Fault::Cut { a, b, .. } | Fault::Stall { a, b, .. } = fault {
                assert_ne!(a, b);
            }
        }
        assert_eq!(by_kind(&faults).values().sum::<u64>(), 200);
        assert_eq!(
            by_kind(&faults).len(),
            5,
            "every kind is drawn: {:?}",
            by_kind(&faults)
        );
        let flips = disk_flips(9, &plan, &faults, &nodes);
        assert!(flips.is_empty(), "the two losses took the budget: {flips:?}");
        let freezes: Vec<_> = (0..50).map(|seed| recovery_freezes(seed, &plan)).collect();
        assert!(freezes.iter().all(|f| f.len() <= 2));
        assert!(freezes.iter().any(|f| f.len() == 2) && freezes.iter().any(|f| f.is_empty()));
        assert!(freezes
            .iter()
            .flatten()
            .all(|f| f.after < Duration::from_millis(150) && f.lasting < plan.longest));
    }

    #[test]
    fn bit_flips_take_what_the_losses_left_of_the_budget_and_spare_the_lost() {
        let plan = window(10, 0, 0);
        let nodes = names("n", 6);
        let lost = [(Duration::from_secs(2), Fault::Lose { node: "n4".into() })];
        let (mut counts, mut at_rest) = ([0usize; 3], 0);
        for seed in 0..200 {
            let flips = disk_flips(seed, &plan, &lost, &nodes);
            assert_eq!(flips, disk_flips(seed, &plan, &lost, &nodes));
            assert!(flips.len() <= 1, "one loss leaves one flip: {flips:?}");
            counts[disk_flips(seed, &plan, &[], &nodes).len()] += 1;
            for (at, flip) in &flips {
                match at {
                    Some(at) => assert!(*at >= plan.from && *at < plan.from + plan.window),
                    None => at_rest += 1,
                }
                assert!(
                    matches!(flip, Fault::Flip { node, .. } if node != "n4"),
                    "{flip:?}"
                );
            }
        }
        assert!(
            counts.iter().all(|&c| c > 20),
            "none, one and two flips are drawn: {counts:?}"
        );
        assert!(
            at_rest > 10 && at_rest < 60,
            "{at_rest} of about 100 flips strike once the job stopped"
        );
    }

    #[test]
    fn torn_writes_take_what_losses_and_flips_left_and_torn_logs_come_with_coordinator_crashes() {
        let plan = window(10, 0, 0);
        let nodes = names("n", 6);
        let at = Duration::from_secs(2);
        let struck = [
            (at, Fault::Lose { node: "n4".into() }),
            (
                at,
                Fault::Flip {
                    node: "n1".into(),
                    pick: 0,
                },
            ),
        ];
        assert!((0..100).all(|seed| disk_tears(seed, &plan, &struck, &nodes).is_empty()));
        let (mut counts, lost) = ([0usize; 3], &struck[..1]);
        for seed in 0..200 {
            let tears = disk_tears(seed, &plan, lost, &nodes);
            assert_eq!(tears, disk_tears(seed, &plan, lost, &nodes));
            counts[disk_tears(seed, &plan, &[], &nodes).len()] += 1;
            for (at, tear) in &tears {
                assert!(*at >= plan.from && *at < plan.from + plan.window);
                assert!(
                    matches!(tear, Fault::Tear { node, down, .. } if node != "n4" && *down < plan.longest),
                    "{tear:?}"
                );
            }
        }
        assert!(
            counts.iter().all(|&c| c > 20),
            "none, one and two tears: {counts:?}"
        );
        let crashes: Vec<(Duration, Fault)> = (0..40)
            .map(|i| {
                let host = if i % 2 == 0 { "coord" } else { "n0" };
                let down = Duration::from_secs(1);
                (
                    Duration::from_secs(i),
                    Fault::Restart {
                        host: host.into(),
                        down,
                    },
                )
            })
            .collect();
        let torn = log_tears(3, &crashes, "coord");
        assert_eq!(torn, log_tears(3, &crashes, "coord"));
        assert!(
            torn.len() > 3 && torn.len() < 17,
            "about one coordinator crash in two: {torn:?}"
        );
        assert!(torn
            .iter()
            .all(|(at, t)| matches!(t, Fault::TearLog { .. }) && at.as_secs() % 2 == 0));
    }

    #[test]
    fn about_one_run_in_isolations_cuts_the_coordinator_off_for_a_while_that_ends_before_the_faults_heal() {
        let plan = FaultPlan {
            isolations: 4,
            isolation: (Duration::from_secs(5), Duration::from_secs(9)),
            ..window(20, 0, 0)
        };
        let healed = plan.from + plan.window + plan.longest;
        let mut isolated = 0;
        for seed in 0..400 {
            let drawn = isolations(seed, &plan);
            assert_eq!(drawn, isolations(seed, &plan));
            assert!(drawn.len() <= 1, "{drawn:?}");
            for (at, fault) in &drawn {
                let Fault::Isolate { lasting } = fault else {
                    panic!("{fault:?} is no isolation")
                };
                assert!(
                    *lasting >= plan.isolation.0 && *lasting < plan.isolation.1,
                    "{fault:?}"
                );
                assert!(*at >= plan.from && *at + *lasting <= healed, "{at:?} {fault:?}");
                isolated += 1;
            }
        }
        assert!(
            isolated > 70 && isolated < 130,
            "{isolated} of 400 runs, about one in four"
        );
        let none = FaultPlan {
            isolations: 0,
            ..plan
        };
        assert!((0..100).all(|seed| isolations(seed, &none).is_empty()));
    }

    #[test]
    fn about_one_run_in_stops_stops_hosts_within_the_window_and_its_recoveries() {
        let plan = FaultPlan {
            stops: 4,
            stop: (Duration::from_millis(100), Duration::from_secs(9)),
            ..window(20, 0, 2)
        };
        let healed = plan.from + plan.window + plan.longest;
        let hosts = names("h", 5);
        let (mut stopping, mut of_coordinator, mut in_recoveries) = (0, 0, 0);
        for seed in 0..400 {
            let drawn = stops(seed, &plan, "coord", &hosts);
            assert_eq!(drawn, stops(seed, &plan, "coord", &hosts));
            assert!(
                drawn.scheduled.len() <= 3 && drawn.in_recoveries.len() <= 2,
                "{drawn:?}"
            );
            stopping += usize::from(!drawn.scheduled.is_empty());
            for (at, fault) in &drawn.scheduled {
                let Fault::Stop { host, lasting } = fault else {
                    panic!("{fault:?} is no stop")
                };
                assert!(*lasting >= plan.stop.0 && *lasting < plan.stop.1, "{fault:?}");
                assert!(*at >= plan.from && *at + *lasting <= healed, "{at:?} {fault:?}");
                of_coordinator += usize::from(host == "coord");
            }
            for strike in &drawn.in_recoveries {
                assert!(strike.after < Duration::from_millis(150));
                assert!(strike.lasting >= plan.stop.0 && strike.lasting < plan.stop.1);
                in_recoveries += 1;
            }
        }
        assert!(
            stopping > 70 && stopping < 130,
            "{stopping} of 400 runs, about one in four"
        );
        assert!(
            of_coordinator > stopping / 2,
            "{of_coordinator} of the coordinator"
        );
        assert!(in_recoveries > 0);
        let none = FaultPlan { stops: 0, ..plan };
        assert!((0..100).all(|seed| stops(seed, &none, "coord", &hosts) == Stops::default()));
    }

    #[test]
    fn blips_are_short_faults_of_every_kind_but_losses_in_the_window() {
        let plan = FaultPlan {
            blips: 300,
            blip_longest: Duration::from_millis(400),
            ..window(10, 0, 0)
        };
        let hosts = names("h", 5);
        let drawn = blips(4, &plan, &hosts);
        assert_eq!(drawn, blips(4, &plan, &hosts));
        assert_eq!(drawn.len(), 300);
        let kinds = by_kind(&drawn);
        assert_eq!(
            kinds.keys().copied().collect::<Vec<_>>(),
            ["cut", "freeze", "restart", "stall"]
        );
        for (at, fault) in &drawn {
            assert!(*at >= plan.from && *at < plan.from + plan.window);
            let lasting = match fault {
                Fault::Restart { down, .. } => down,
                Fault::Cut { lasting, .. } | Fault::Stall { lasting, .. } | Fault::Freeze { lasting, .. } => {
                    lasting
                }
                other => panic!("{other:?} is no blip"),
            };
            assert!(*lasting < plan.blip_longest, "{fault:?}");
        }
        let none = FaultPlan { blips: 0, ..plan };
        assert!(blips(4, &none, &hosts).is_empty());
    }
}
