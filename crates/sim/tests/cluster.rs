//! The real coordinator and agents as simulated hosts: epochs commit, a node is lost, its
//! ranks' images come back byte for byte.

use std::time::Duration;

use eckpt_coding::config::CodingConfig;
use eckpt_sim::cluster::{Shape, SimCluster};
use eckpt_sim::ranks::Rank;
use eckpt_sim::trace::Lines;

#[test]
fn epochs_commit_on_simulated_hosts() {
    eckpt_sim::install();
    let cluster = SimCluster::create(Shape {
        nodes: 6,
        spares: 0,
        coding: CodingConfig::default(),
        deadlines: Default::default(),
        flush_every: None,
    })
    .unwrap();
    let trace = Lines::new(true);
    let mut sim = turmoil::Builder::new()
        .rng_seed(1)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(5))
        .simulation_duration(Duration::from_secs(600))
        .build();
    cluster.add_hosts(&mut sim, &trace);
    let dir = cluster.dir().clone();
    let t = trace.clone();
    sim.client("job", async move {
        eckpt_sim::cluster::until_registered(&dir).await?;
        t.event("job", "every node registered");
        let world = 4u32;
        for round in 0..3u64 {
            let mut ranks = Vec::new();
            for r in 0..world {
                let dir = dir.clone();
                ranks.push(tokio::task::spawn_local(async move {
                    Rank::new(&dir, r, world, Default::default(), Default::default())?
                        .checkpoint(7, 64 << 10)
                        .await
                }));
            }
            for r in ranks {
                let done = r.await??;
                t.event("job", format!("round {round}: {done:?}"));
                assert!(done.committed);
            }
        }
        Ok(())
    });
    sim.run().unwrap();
}
