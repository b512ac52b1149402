//! Which agents are alive, and whether each is the node it claims to be.
//!
//! Each agent holds a session: it registers (with the token kept in its store), says what
//! it holds, then heartbeats until its connection drops. One silent for the cluster's
//! liveness period while others are heard is dead — but when the coordinator hears from
//! nobody at all it suspects its own link (a partition) rather than every node, and
//! declares nobody dead for up to the cluster's partition grace.
//!
//! A registration is refused before anything is journaled when another agent of the same
//! name is alive, or when its store is not the node's (another token, and not a new store).
//! A node whose store lacks committed data it should hold is alive but **damaged**, so that
//! recovery rebuilds it instead of the cluster calling its group healthy.
//!
//! A silence of the coordinator's own that outlasts the grace declares its nodes dead, but
//! not lost: until it hears agents again (for at most another grace and an agent's
//! reconnection) and for an agent's longest reconnection after, those nodes are *awaited*,
//! so that no recovery judges a group lost before its members had the chance to come back.
//!
//! Its times are tokio's clock (`tokio::time::Instant`), as are the run clock's and the
//! owner's: the monotonic clock in the daemon, virtual in the unit tests that pause it, which
//! then judge liveness in no real time and the same way on a loaded machine as on an idle one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use eckpt_proto::Connection;

use super::owner::{Draft, State};
use super::{Coordinator, Journal, NodeEntry};
use eckpt_cluster_api::call::Call;
use eckpt_cluster_api::msg::{
    CoordRequest, CoordResponse, Heartbeat, Inventory, NodeInfo, Registered, Registration,
};
use eckpt_cluster_api::{ClusterError, WireError};

/// An agent's session as the coordinator sees it.
pub(super) struct Live {
    info: NodeInfo,
    token: String,
    /// When it was really last heard: what `status` reports. When it was last seen for
    /// judging it alive — set ahead after a silence of the coordinator's own
    /// ([`State::end_silence`]) — is in [`State::sightings`].
    heard: Instant,
    session: u64,
    /// What it holds was compared with the journal (the session's first request): only
    /// then is it counted alive.
    checked: bool,
    /// Committed data it should hold and does not.
    damage: Option<Missing>,
    /// The first decision (an epoch) the agent was not told: it registers again.
    missed: Option<u64>,
}

/// What a node should hold of the committed state and does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Missing {
    /// What, in one line (`status`, logs).
    pub what: String,
    /// Whether committed rank data is among it. When it is not, only coded objects are
    /// missing, which the coordinator re-encodes by itself without moving any rank
    /// (`repair.rs`).
    pub ranks: bool,
}

/// What `node` should hold of the journal's committed state and does not, by its
/// inventory: each of its ranks at the committed epoch, and every coded object its
/// position holds something of.
pub(super) fn missing(journal: &Journal, node: &str, held: &Inventory) -> Option<Missing> {
    if journal.committed == 0 {
        return None;
    }
    let mut problems = Vec::new();
    for rank in journal.ranks_on(node) {
        match held.ranks.iter().find(|(r, _)| *r == rank).and_then(|(_, e)| *e) {
            Some(epoch) if epoch >= journal.committed => {}
            Some(epoch) => problems.push(format!(
                "rank {rank} is at epoch {epoch}, not the committed {}",
                journal.committed
            )),
            None => problems.push(format!("no committed epoch of rank {rank}")),
        }
    }
    let ranks = !problems.is_empty();
    for id in journal.held_objects(node) {
        if !held.objects.contains(&id) {
            problems.push(format!("no coded object {id}"));
        }
    }
    (!problems.is_empty()).then(|| Missing {
        what: problems.join("; "),
        ranks,
    })
}

/// Journals agent `reg`: its address, store token and failure domain (a node the journal
/// does not know joins as a spare). Before anything is coded, and while no encode reads
/// them (`encoding`), a new domain forms the groups anew.
fn record_registration(journal: &mut Draft, reg: &Registration, encoding: bool) {
    let (info, name) = (&reg.info, &reg.info.name);
    // A node the journal does not know joins as a spare, in the domain it says.
    let entry = journal.nodes.entry(name.clone()).or_insert(NodeEntry {
        info: None,
        spare: true,
        removed: false,
        token: None,
        domain: None,
    });
    entry.info = Some(info.clone());
    entry.token = Some(reg.token.clone());
    if let Some(domain) = reg.domain.as_ref().filter(|d| entry.domain.as_ref() != Some(*d)) {
        if let Some(before) = &entry.domain {
            tracing::warn!(node = %name, from = %before, to = %domain, "node says it moved to another failure domain");
        }
        entry.domain = Some(domain.clone());
        // Before anything is coded (and while no encode reads the groups) the groups
        // are formed anew across the domains as now known; after, at the next
        // regrouping (a recovery), and until then `status` says whether a group is
        // exposed.
        if !encoding && journal.spread_before_coding() {
            let groups: Vec<&Vec<String>> = journal.groups.iter().map(|g| &g.group.members).collect();
            tracing::info!(node = %name, ?groups, "groups formed anew across the failure domains agents registered with");
        }
    }
}

impl State {
    /// The latest moment any agent was heard from, when the coordinator has heard nobody
    /// since for longer than the liveness period (however long).
    fn isolated_since(&self) -> Option<Instant> {
        let latest = self.sightings.latest()?;
        (latest.elapsed() >= self.deadlines.liveness()).then_some(latest)
    }

    /// [`State::isolated_since`] while the silence is within the partition grace: the
    /// coordinator suspects its own link and declares nobody dead.
    fn silence(&self) -> Option<Instant> {
        let (liveness, grace) = (self.deadlines.liveness(), self.deadlines.partition_grace());
        self.isolated_since()
            .filter(|latest| latest.elapsed() < liveness + grace)
    }

    /// The nodes alive when a silence that began after `latest` began: heard within a
    /// liveness period of the last agent heard (a node already dead then is not the
    /// silence's). Removed nodes are not awaited by anyone.
    fn silenced(&self, latest: Instant) -> impl Iterator<Item = &String> {
        self.sightings
            .seen_within(self.deadlines.liveness(), latest)
            .filter(|n| self.journal().nodes.get(*n).is_some_and(|e| !e.removed))
    }

    /// Leaves the silence going on, if the coordinator hears nobody, out of the time leases
    /// are judged on (`RunClock::leave_out_silence`): a renewal that gets through before
    /// any agent's heartbeat does finds its lease as the silence left it.
    /// The silence is timed from the last agent the coordinator heard (`State::heard_any`),
    /// not from the latest sighting: after one silence every node's sighting is set ahead by
    /// its reconnection time, and a second silence within it would go uncounted (found by
    /// the simulator: a coordinator frozen twice in a row).
    pub(super) fn leave_out_silence(&self) {
        let heard = self.heard_any;
        if heard.elapsed() >= self.deadlines.liveness() {
            self.clock
                .leave_out_silence(heard, self.deadlines.partition_grace());
        }
    }

    /// Seconds the coordinator has heard from no agent, while it suspects its own link.
    pub(super) fn isolation(&self) -> Option<Duration> {
        self.silence().map(|latest| latest.elapsed())
    }

    /// Alive agents by name: checked, and heard from within the liveness period — or not
    /// yet outlived by another agent: a node is dead once others were heard a liveness
    /// period after it, so when every agent falls silent at once (the coordinator's own
    /// link is cut) nobody is declared dead, for up to the partition grace.
    pub(super) fn alive(&self) -> BTreeMap<String, NodeInfo> {
        self.live
            .iter()
            .filter(|(n, _)| self.is_alive(n))
            .map(|(n, l)| (n.clone(), l.info.clone()))
            .collect()
    }

    /// How to reach `node` if it is alive: [`State::alive`] for one node, in O(log N).
    pub(super) fn alive_node(&self, node: &str) -> Option<NodeInfo> {
        self.is_alive(node)
            .then(|| self.live.get(node).map(|l| l.info.clone()))
            .flatten()
    }

    /// Whether `node` is alive ([`State::alive`]), without building the whole map: asked
    /// per node, per request and per watch of a task, it costs O(log N).
    pub(super) fn is_alive(&self, node: &str) -> bool {
        let (liveness, grace) = (self.deadlines.liveness(), self.deadlines.partition_grace());
        let (Some(l), Some(seen), Some(latest)) = (
            self.live.get(node),
            self.sightings.get(node),
            self.sightings.latest(),
        ) else {
            return false;
        };
        l.checked
            && (seen.elapsed() < liveness
                || (latest.duration_since(seen) < liveness && latest.elapsed() < liveness + grace))
    }

    /// Nodes down but not lost, that nobody rebuilds because their agents may be on their
    /// way back:
    /// - nodes of the journal that have not registered since this coordinator started, or
    ///   since it heard agents again after a silence of its own beyond the partition grace
    ///   ([`State::end_silence`]), for an agent's longest reconnection
    ///   (`Deadlines::reconnection`) from then: to find a coordinator that was restarted or
    ///   replaced on another host, or a link that came back;
    /// - while the coordinator still hears nobody past the grace (for at most another
    ///   grace and an agent's reconnection), the nodes alive when that silence began: what
    ///   they hold is judged once the link is back, not while nothing can be heard.
    pub(super) fn awaited(&self) -> BTreeSet<String> {
        let (liveness, grace) = (self.deadlines.liveness(), self.deadlines.partition_grace());
        let mut awaited = if self.awaiting_since.elapsed() < self.deadlines.reconnection() {
            self.unregistered.clone()
        } else {
            BTreeSet::new()
        };
        if let Some(latest) = self.isolated_since() {
            let silent = latest.elapsed();
            let judged = liveness + 2 * grace + self.deadlines.reconnection();
            if silent >= liveness + grace && silent < judged {
                awaited.extend(self.silenced(latest).cloned());
            }
        }
        // One heard on its old session is alive meanwhile; it stays awaited should that
        // session end before the agent registers again.
        awaited.retain(|n| !self.is_alive(n));
        awaited
    }

    /// Alive nodes missing committed data, with what is missing.
    pub(super) fn damaged(&self) -> BTreeMap<String, String> {
        self.missing_now()
            .map(|(n, m)| (n.clone(), m.what.clone()))
            .collect()
    }

    /// Whether some alive node misses coded objects and every damaged node misses nothing
    /// but coded objects: what the coordinator repairs by itself (`repair.rs`).
    pub(super) fn parity_gaps_only(&self) -> bool {
        let mut damaged = self.missing_now().peekable();
        damaged.peek().is_some() && damaged.all(|(_, m)| !m.ranks)
    }

    /// What alive `node` misses of committed data, if anything: [`State::damaged`] for one
    /// node, in O(log N).
    pub(super) fn damage_of(&self, node: &str) -> Option<&str> {
        let damage = self.live.get(node)?.damage.as_ref()?;
        self.is_alive(node).then_some(damage.what.as_str())
    }

    /// Alive nodes missing committed data.
    fn missing_now(&self) -> impl Iterator<Item = (&String, &Missing)> {
        self.live
            .iter()
            .filter_map(|(n, l)| Some((n, l.damage.as_ref()?)))
            .filter(|(n, _)| self.is_alive(n))
    }

    /// Marks `node` damaged, missing coded objects (`what`): a check after a recovery found
    /// that it does not hold the parity it was told to commit. Its next registration
    /// compares what it holds with the journal again.
    pub(super) fn lacks_objects(&mut self, node: &str, what: String) {
        if let Some(l) = self.live.get_mut(node) {
            tracing::warn!(node = %node, missing = %what, "node does not hold the parity it committed: damaged");
            l.damage = Some(Missing { what, ranks: false });
        }
    }

    /// Marks `node` damaged, holding rank data that fails its checksums (`what`): found
    /// when the data was read. Only a recovery rebuilds it (`eckpt recover`, `eckpt run`).
    pub(super) fn holds_damaged_ranks(&mut self, node: &str, what: String) {
        if let Some(l) = self.live.get_mut(node) {
            tracing::warn!(node = %node, damage = %what, "node holds rank data that fails its checksums: damaged");
            l.damage = Some(Missing { what, ranks: true });
        }
    }

    /// Forgets the damage of `nodes`: a recovery rebuilt what they were missing.
    pub(super) fn clear_damage(&mut self, nodes: &BTreeSet<String>) {
        for (name, l) in self.live.iter_mut() {
            if nodes.contains(name) {
                l.damage = None;
            }
        }
    }

    /// Why `node` is not alive, or `None` if it is.
    pub(super) fn not_alive(&self, node: &str) -> Option<String> {
        if self.is_alive(node) {
            return None;
        }
        Some(match self.live.get(node) {
            None => "down: its agent is gone".into(),
            Some(Live {
                missed: Some(epoch), ..
            }) => {
                format!("missed the decision on epoch {epoch}: registering again")
            }
            Some(l) if !l.checked => "registering".into(),
            Some(_) => format!(
                "stopped responding (no heartbeat for {:.1} s)",
                self.sightings
                    .get(node)
                    .map_or(0.0, |seen| seen.elapsed().as_secs_f64())
            ),
        })
    }

    /// Checks the registration and journals the agent (a new node is a spare): refused,
    /// with nothing written, when another agent of the name is alive, or when the store is
    /// another's (a token that is not the node's, from a store that is not new). Starts
    /// the session (at once, so that a second agent of the name registering meanwhile is
    /// refused; if the journal write fails, the caller ends it); says what the agent keeps.
    pub(super) fn register(
        &mut self,
        journal: &mut Draft,
        reg: &Registration,
        session: u64,
    ) -> Result<Registered, ClusterError> {
        let info = &reg.info;
        let name = &info.name;
        self.end_silence();
        let recently_seen = self
            .sightings
            .get(name)
            .is_some_and(|seen| seen.elapsed() < self.deadlines.liveness());
        if let Some(other) = self.live.get(name).filter(|o| {
            recently_seen && (o.info.pid != info.pid || o.info.host != info.host || o.token != reg.token)
        }) {
            return Err(ClusterError::Fenced(format!(
                "node {name} is already running (agent pid {} at {}): a second agent of that name is refused",
                other.info.pid, other.info.tcp
            )));
        }
        match journal.nodes.get(name).and_then(|e| e.token.clone()) {
            Some(token) if token != reg.token && !reg.fresh => {
                return Err(ClusterError::Fenced(format!(
                    "node {name} is registered with another store: {} holds the token of another node (a copy of another node's store?); refused",
                    info.store.display()
                )));
            }
            Some(token) if token != reg.token => {
                tracing::warn!(node = %name, "registered with a new store: its data will be rebuilt");
            }
            _ => {}
        }
        // The same agent opening a new session (after a partition, or a heartbeat that
        // timed out) stays what it was meanwhile: alive, and damaged or not.
        let (checked, damage) = self
            .live
            .get(name)
            .filter(|o| o.info.pid == info.pid && o.info.host == info.host && o.token == reg.token)
            .map(|o| (o.checked, o.damage.clone()))
            .unwrap_or((false, None));
        // A session the journal already records as it is — the same agent opening a new
        // session after a heartbeat that timed out, a partition, a stall of the coordinator's
        // own — changes nothing in it: no journal write, so when every agent comes back at
        // once their answers do not queue behind the disk (on a loaded host, past an agent's
        // wait for its registration, and then past its reconnection).
        let recorded = journal.nodes.get(name).is_some_and(|e| {
            e.info.as_ref() == Some(info)
                && e.token.as_ref() == Some(&reg.token)
                && reg.domain.as_ref().is_none_or(|d| e.domain.as_ref() == Some(d))
        });
        if !recorded {
            record_registration(journal, reg, self.epochs.running);
        }
        self.ended.remove(name);
        self.sightings.set(name, Instant::now());
        self.live.insert(
            name.clone(),
            Live {
                info: info.clone(),
                token: reg.token.clone(),
                heard: Instant::now(),
                session,
                checked,
                damage,
                missed: None,
            },
        );
        Ok(Registered {
            term: journal.term,
            committed: journal.committed,
            keep: journal.keep_of(name),
            versions: journal.versions_of(name),
            discard: journal.nodes.get(name).is_some_and(|e| e.removed),
        })
    }

    /// A node rebuilt elsewhere while it was away, back and holding nothing (it discarded
    /// what it held when it registered: `Registered::discard`), becomes a spare, so that
    /// the next loss can be rebuilt onto it. Only for the session that reported it, and
    /// only while no group and no rank is the node's.
    pub(super) fn rejoin_as_spare(&mut self, journal: &mut Draft, node: &str, session: u64) {
        let current = self.live.get(node).is_some_and(|l| l.session == session);
        let removed = journal.nodes.get(node).is_some_and(|e| e.removed);
        let unused = journal.group_of(node).is_none() && !journal.placement.values().any(|n| n == node);
        if !(current && removed && unused) {
            return;
        }
        if let Some(entry) = journal.nodes.get_mut(node) {
            entry.removed = false;
            entry.spare = true;
        }
        tracing::info!(node = %node, "a node rebuilt elsewhere while it was away rejoined as a spare");
    }

    /// Renews the session — unless the agent missed a decision ([`State::missed_decision`]):
    /// then the session ends, and the agent registers again and resolves its store against
    /// the journal, as after any absence. (Its connection may have stayed open throughout,
    /// as when the agent was stopped past its liveness period: nothing else would make it
    /// register again, and it would keep what it prepared for a committed epoch undecided.)
    pub(super) fn heard_from(&mut self, node: &str, session: u64) -> Result<(), ClusterError> {
        self.end_silence();
        if self.journal().nodes.get(node).is_some_and(|e| e.removed) {
            // Alive through the recovery that rebuilt it elsewhere (it registered before
            // that recovery's commit): it holds what is no longer the cluster's, and
            // registers again to discard it and rejoin as a spare.
            return Err(ClusterError::Node {
                node: node.into(),
                reason: "this node was rebuilt elsewhere: register again to rejoin as a spare".into(),
            });
        }
        let Some(l) = self.live.get_mut(node).filter(|l| l.session == session) else {
            // Another agent registered as this node meanwhile (this one was stopped past
            // its liveness and replaced), or the session was forgotten: its agent must
            // register again, which refuses one that was replaced — it exits, and lets go
            // of its store and its ports.
            return Err(ClusterError::Node {
                node: node.into(),
                reason: "this session is no longer the node's: register again".into(),
            });
        };
        l.heard = Instant::now();
        if let Some(missed) = l.missed {
            // One counted dead is gone until it registers; one that missed the decision
            // during the coordinator's own silence stays alive through its new registration.
            if !l.checked {
                self.forget(node);
            }
            tracing::warn!(node = %node, epoch = missed, "heard again from an agent that missed a decision: it registers again");
            return Err(ClusterError::Node {
                node: node.into(),
                reason: format!("missed the decision on epoch {missed}: register again"),
            });
        }
        // Never earlier than it is: after a silence of the coordinator's own, a node's last
        // sighting is set ahead to give it its reconnection time, and a heartbeat that was
        // held up in its old connection (delivered once the link is back, just before that
        // connection's end) must not take that back.
        let now = Instant::now();
        let seen = self.sightings.get(node).map_or(now, |seen| seen.max(now));
        self.sightings.set(node, seen);
        Ok(())
    }

    /// Notes that the agent of `session` was not told the decision on `epoch` (it was not
    /// alive, or the request failed): it must register again before it counts as alive.
    /// `nobody_told`: no agent at all was told it. Whether this is the first decision the
    /// session missed (later ones are no news: it registers again anyway).
    pub(super) fn missed_decision(
        &mut self,
        node: &str,
        session: u64,
        epoch: u64,
        nobody_told: bool,
    ) -> bool {
        // While the coordinator hears nobody (its own link cut) every agent misses the
        // decision and nobody is declared dead: it stays alive, and registers again once
        // heard. So too when no agent was told it, even before the silence is a liveness
        // period old (the link went down as the decision was sent): the coordinator cannot
        // tell an agent's failure from its own, and the agents' heartbeats will.
        let silent = self.silence().is_some() || nobody_told;
        let Some(l) = self.live.get_mut(node).filter(|l| l.session == session) else {
            return false;
        };
        let first = l.missed.is_none();
        l.missed.get_or_insert(epoch);
        l.checked &= silent;
        first
    }

    /// Every agent with a session, alive or not, with its session.
    pub(super) fn with_sessions(&self) -> Vec<(NodeInfo, u64)> {
        self.live.values().map(|l| (l.info.clone(), l.session)).collect()
    }

    /// [`State::with_sessions`] of `nodes` only.
    pub(super) fn with_sessions_of(&self, nodes: &BTreeSet<String>) -> Vec<(NodeInfo, u64)> {
        nodes
            .iter()
            .filter_map(|n| self.live.get(n))
            .map(|l| (l.info.clone(), l.session))
            .collect()
    }

    /// Called as the coordinator hears an agent: if it had heard nobody for longer than the
    /// liveness period, the silence was its own link's, so every node alive when it began
    /// gets an agent's longest reconnection (`Deadlines::reconnection`) from now to be heard
    /// again (their connections come back one by one: an agent whose heartbeat or
    /// connection waits out TCP's retransmission backoff gives up after one liveness period
    /// and opens a new session). Within the partition grace they stay alive meanwhile; past
    /// it they were declared dead, and are awaited ([`State::awaited`]) until they register.
    fn end_silence(&mut self) {
        self.leave_out_silence();
        self.heard_any = Instant::now();
        let (liveness, grace) = (self.deadlines.liveness(), self.deadlines.partition_grace());
        let Some(latest) = self.isolated_since() else {
            return;
        };
        let silent = latest.elapsed();
        if silent < liveness + grace {
            let restart = Instant::now() + self.deadlines.reconnection();
            let silenced: Vec<String> = self.sightings.seen_within(liveness, latest).cloned().collect();
            for node in silenced {
                self.sightings.set(&node, restart);
            }
        } else {
            let silenced: Vec<String> = self.silenced(latest).cloned().collect();
            self.unregistered.extend(silenced);
            self.awaiting_since = Instant::now();
        }
        tracing::warn!(
            silent_s = silent.as_secs_f64(),
            "heard from an agent again after hearing from none: the silence was this coordinator's"
        );
    }

    /// Compares what the agent holds with the journal; from now on it counts as alive.
    /// Whether it misses coded objects only: then the coordinator re-encodes them by
    /// itself (`repair.rs`).
    pub(super) fn check_holdings(&mut self, node: &str, session: u64, held: &Inventory) -> bool {
        let damage = missing(self.journal(), node, held);
        if let Some(m) = &damage {
            tracing::warn!(node = %node, missing = %m.what, "node holds less than the journal says: damaged");
        }
        let parity_gap = damage.as_ref().is_some_and(|m| !m.ranks);
        let Some(l) = self.live.get_mut(node).filter(|l| l.session == session) else {
            return false;
        };
        // One that missed a decision meanwhile resolved against an older journal.
        l.checked = l.missed.is_none();
        l.damage = damage;
        l.heard = Instant::now();
        self.sightings.set(node, l.heard);
        self.unregistered.remove(node);
        parity_gap
    }

    /// The session of each of `nodes` that has one now: what [`State::same_sessions`]
    /// checks before a decision that relies on what those agents prepared.
    pub(super) fn sessions_of(&self, nodes: &BTreeSet<String>) -> BTreeMap<String, u64> {
        nodes
            .iter()
            .filter_map(|n| Some((n.clone(), self.live.get(n)?.session)))
            .collect()
    }

    /// Refuses a decision that relies on what the agents of `sessions` prepared if one of
    /// them is now in another session. An agent that registered again meanwhile (after a
    /// partition, or a heartbeat that timed out) resolved its store against the journal of
    /// that moment and dropped what it had prepared for the undecided epoch: committing the
    /// epoch then would record data that is gone. (An agent that is gone and has not come
    /// back dropped nothing: what it prepared is durable, and it resolves the decision when
    /// it registers.) Registrations are changes of the journal too, so none falls between
    /// this check and the decision's write.
    pub(super) fn same_sessions(&self, sessions: &BTreeMap<String, u64>) -> Result<(), ClusterError> {
        match sessions
            .iter()
            .find(|(n, s)| self.live.get(*n).is_some_and(|l| l.session != **s))
        {
            Some((node, _)) => Err(ClusterError::Node {
                node: node.clone(),
                reason: REGISTERED_AGAIN.into(),
            }),
            None => Ok(()),
        }
    }

    /// Forgets the agent, unless a newer session of it replaced this one — or unless the
    /// coordinator is hearing nobody (within the partition grace or past it: past it, the
    /// node must still count among those the silence took, [`State::end_silence`]), or has
    /// just heard agents again after such a silence:
    /// then a session that ends is the old connection of a partition dying (its FIN or RST
    /// arrives once the link is back, often before the agent's new session), not the agent.
    /// The node is then judged by when it was last heard, as during the silence.
    pub(super) fn end_session(&mut self, node: &str, session: u64) {
        let in_silence = self.isolated_since().is_some();
        if self.live.get(node).is_none_or(|l| l.session != session) {
            return;
        }
        if in_silence || self.sightings.get(node).is_some_and(|seen| seen > Instant::now()) {
            tracing::info!(node = %node, "agent session ended around a partition: judged by its heartbeats");
            return;
        }
        self.forget(node);
        tracing::warn!(node = %node, "agent session ended");
    }

    /// Ends `node`'s session, keeping when it was last heard ([`State::silent_for`]): the
    /// end of the connection when it came within the liveness period of its last heartbeat
    /// (its agent was killed: the loss is now), else that heartbeat (it fell silent first).
    fn forget(&mut self, node: &str) {
        if let Some(l) = self.live.remove(node) {
            self.sightings.remove(node);
            let now = Instant::now();
            let heard = if now.saturating_duration_since(l.heard) < self.deadlines.liveness() {
                now
            } else {
                l.heard
            };
            self.ended.insert(node.to_string(), heard);
        }
    }

    /// How long since the coordinator last heard `node` (see [`State::forget`]); `None`
    /// when it has not heard it since it started.
    pub(super) fn silent_for(&self, node: &str) -> Option<Duration> {
        let heard = match self.live.get(node) {
            Some(l) => l.heard,
            None => *self.ended.get(node)?,
        };
        Some(Instant::now().saturating_duration_since(heard))
    }

    /// Forgets a session whose registration was not written.
    fn drop_session(&mut self, node: &str, session: u64) {
        if self.live.get(node).is_some_and(|l| l.session == session) {
            self.forget(node);
        }
    }
}

impl Coordinator {
    /// What the agent of `session` holds, as it reports after registering: compared with the
    /// journal, after which the node counts as alive; parity it lacks is re-encoded soon; a
    /// node rebuilt elsewhere that holds nothing now rejoins as a spare.
    pub(super) async fn holds(
        self: &Arc<Self>,
        node: String,
        session: u64,
        held: Inventory,
    ) -> Result<(), ClusterError> {
        let holds_nothing = held.ranks.is_empty() && held.objects.is_empty();
        let at = node.clone();
        let (parity_gap, removed) = self
            .read(move |s| {
                let gap = s.check_holdings(&at, session, &held);
                (gap, s.journal().nodes.get(&at).is_some_and(|e| e.removed))
            })
            .await;
        if removed && holds_nothing {
            self.state
                .change(move |s, journal| s.rejoin_as_spare(journal, &node, session))
                .await?;
        }
        self.changed.notify_waiters();
        if parity_gap {
            self.repair_soon();
        }
        Ok(())
    }

    /// Applies `change` to the journal, as [`Coordinator::update`] does, only if no agent of
    /// `sessions` is now in another session ([`State::same_sessions`]).
    pub(super) async fn update_if_same_sessions<T: Send + 'static>(
        &self,
        sessions: BTreeMap<String, u64>,
        change: impl FnOnce(&mut Draft) -> T + Send + 'static,
    ) -> Result<T, ClusterError> {
        self.state
            .change(move |s, draft| s.same_sessions(&sessions).map(|()| change(draft)))
            .await?
    }
}

/// Why [`State::same_sessions`] refuses a decision.
const REGISTERED_AGAIN: &str =
    "registered again while its part of the decision was prepared (what it prepared is dropped)";

/// Whether `e` is a decision refused by [`State::same_sessions`]: made again, it may pass.
pub(super) fn registered_again(e: &ClusterError) -> bool {
    matches!(e, ClusterError::Node { reason, .. } if reason == REGISTERED_AGAIN)
}

/// An agent's session: registration, what it holds, then heartbeats until the connection
/// drops.
pub(super) async fn session(
    coord: Arc<Coordinator>,
    mut conn: Connection,
    reg: Registration,
) -> Result<(), ClusterError> {
    let id = coord.next_session.fetch_add(1, Ordering::Relaxed);
    let name = reg.info.name.clone();
    let registration = reg.clone();
    let registered = coord
        .state
        .change(move |s, journal| s.register(journal, &registration, id))
        .await
        .and_then(|r| r);
    let registered = match registered {
        Ok(registered) => registered,
        Err(e) => {
            let node = name.clone();
            coord.read(move |s| s.drop_session(&node, id)).await;
            tracing::warn!(node = %name, error = %e, "registration refused");
            conn.send_control(&CoordResponse::Error(WireError::from(&e)))
                .await?;
            return Ok(());
        }
    };
    tracing::info!(node = %name, "agent registered");
    conn.send_control(&Registration::reply(registered)).await?;
    let result = requests(&coord, &mut conn, &name, id).await;
    let node = name.clone();
    coord.read(move |s| s.end_session(&node, id)).await;
    result
}

/// Answers the agent's session requests (what it holds, heartbeats) until the connection
/// drops or it sends anything else.
async fn requests(
    coord: &Arc<Coordinator>,
    conn: &mut Connection,
    node: &str,
    session: u64,
) -> Result<(), ClusterError> {
    loop {
        let node = node.to_string();
        match conn.recv_control::<CoordRequest>().await? {
            CoordRequest::Heartbeat(_) => {
                if let Err(e) = coord.read(move |s| s.heard_from(&node, session)).await {
                    conn.send_control(&CoordResponse::Error(WireError::from(&e)))
                        .await?;
                    return Err(e);
                }
            }
            CoordRequest::Holds(held) => coord.holds(node, session, held).await?,
            other => {
                return Err(ClusterError::Protocol(format!(
                    "unexpected {other:?} on a session"
                )));
            }
        }
        conn.send_control(&Heartbeat::reply(())).await?;
    }
}

/// In virtual time (`start_paused`): the heartbeats, the liveness periods and the grace pass
/// in no real time and in the same order on any machine, however loaded.
#[cfg(test)]
mod tests {
    use super::super::test_cluster::{TestCluster, LIVENESS};
    use super::*;
    use eckpt_coding::config::CodingConfig;

    fn registration(name: &str, token: &str, pid: u32) -> Registration {
        let mut info = TestCluster::info(name);
        info.pid = pid;
        Registration {
            info,
            token: token.into(),
            fresh: false,
            domain: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_agent_of_a_live_node_and_a_copy_of_another_nodes_store_are_refused() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        let before = c.coord.snapshot().await;
        let (second, _) = c.register(registration("n2", "token-n2", 999)).await;
        let e = second.unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Fenced, "{e}");
        assert!(e.to_string().contains("already running"), "{e}");
        // n3's agent is gone; an agent comes back as n3 with n4's store.
        c.kill("n3").await;
        let (copy, _) = c.register(registration("n3", "token-n4", 1)).await;
        let e = copy.unwrap_err();
        assert!(e.to_string().contains("another store"), "{e}");
        let after = c.coord.snapshot().await;
        assert_eq!(
            serde_json::to_value(&before.nodes).unwrap(),
            serde_json::to_value(&after.nodes).unwrap(),
            "a refusal writes nothing"
        );
        assert_eq!(c.coord.alive().await.len(), 5);
        let (back, _) = c.register(registration("n3", "token-n3", 1)).await;
        assert!(back.is_ok(), "its own store is welcome back");
    }

    /// The same agent opening a new session (its heartbeat timed out, a partition, the
    /// coordinator's own stall) writes nothing: the journal and its log are as they were. An agent
    /// restarted (a new pid) is journaled.
    #[tokio::test(start_paused = true)]
    async fn a_new_session_the_journal_records_as_it_is_writes_nothing() {
        use std::os::unix::fs::MetadataExt;
        let c = TestCluster::start(4, CodingConfig::default()).await;
        let file = c.coord.dir.journal();
        // A commit rewrites the snapshot or appends to its log.
        let log = super::super::journal_log::log_path(&file);
        let written = || {
            (
                std::fs::metadata(&file).unwrap().ino(),
                std::fs::metadata(&log).unwrap().len(),
            )
        };
        let before = written();
        let (again, session) = c.register(registration("n2", "token-n2", 1)).await;
        again.unwrap();
        assert_eq!(
            written(),
            before,
            "a session of the agent as recorded rewrote the journal"
        );
        c.stop("n2");
        c.coord.read(move |s| s.end_session("n2", session)).await;
        let (restarted, _) = c.register(registration("n2", "token-n2", 77)).await;
        restarted.unwrap();
        assert_ne!(written(), before, "a restarted agent is journaled");
        assert_eq!(
            c.coord.snapshot().await.nodes["n2"].info.as_ref().unwrap().pid,
            77
        );
    }

    /// Where a node is, its agent says (`eckpt agent --domain`): a spare joins in its
    /// domain, a node moved to another is there from its next registration, and an agent
    /// that says nothing keeps what the journal holds.
    #[tokio::test(start_paused = true)]
    async fn an_agent_says_which_failure_domain_it_is_in() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        let domain_of = |journal: &Journal, node: &str| journal.nodes[node].domain.clone();
        let mut spare = registration("s9", "token-s9", 7);
        spare.domain = Some("r9".into());
        c.register(spare).await.0.unwrap();
        let journal = c.coord.snapshot().await;
        assert_eq!(domain_of(&journal, "s9").as_deref(), Some("r9"));
        assert!(journal.nodes["s9"].spare);
        c.kill("n3").await;
        let mut moved = registration("n3", "token-n3", 1);
        moved.domain = Some("r1".into());
        c.register(moved).await.0.unwrap();
        assert_eq!(domain_of(&c.coord.snapshot().await, "n3").as_deref(), Some("r1"));
        c.register(registration("n3", "token-n3", 1)).await.0.unwrap();
        assert_eq!(
            domain_of(&c.coord.snapshot().await, "n3").as_deref(),
            Some("r1"),
            "an agent that says nothing keeps its domain"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_agent_dies_after_its_liveness_but_everyone_silent_is_the_coordinators_own_silence() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        c.stop("n2");
        let stopped = Instant::now();
        while c.coord.alive().await.contains_key("n2") {
            assert!(stopped.elapsed() < 10 * LIVENESS, "n2 still alive");
            tokio::time::sleep(LIVENESS / 10).await;
        }
        // Its last heartbeat was one heartbeat period (a sixth) before it stopped, or a few
        // on a loaded machine: dead only once it was silent for its liveness period.
        assert!(
            stopped.elapsed() >= LIVENESS / 2,
            "declared dead before its liveness period"
        );
        assert_eq!(c.coord.alive().await.len(), 5);
        let why = c.coord.read(|s| s.not_alive("n2")).await.unwrap();
        assert!(why.starts_with("stopped responding"), "{why}");
        for node in ["n0", "n1", "n3", "n4", "n5"] {
            c.stop(node);
        }
        tokio::time::sleep(2 * LIVENESS).await;
        let alive = c.coord.alive().await;
        assert_eq!(
            alive.len(),
            5,
            "nobody is declared dead within the partition grace"
        );
        assert!(
            c.coord.read(|s| s.isolation()).await.is_some(),
            "the coordinator suspects itself"
        );
    }

    /// `status` says how long each lost node has been silent, so that a recovery is measured
    /// from the loss and not from its detection: a stopped agent from its last heartbeat
    /// (at least the liveness period once it is declared dead), a killed one from the end
    /// of its connection.
    #[tokio::test(start_paused = true)]
    async fn a_lost_node_is_silent_since_it_was_last_heard() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        c.stop("n2");
        let stopped = Instant::now();
        while alive_now(&c, "n2").await {
            assert!(stopped.elapsed() < 10 * LIVENESS, "n2 still alive");
            tokio::time::sleep(LIVENESS / 10).await;
        }
        let silent = c.coord.read(|s| s.silent_for("n2")).await.unwrap();
        assert!(silent >= LIVENESS, "declared dead after {silent:?} of silence");
        assert!(
            silent <= stopped.elapsed() + LIVENESS,
            "silent {silent:?}, stopped {:?} ago",
            stopped.elapsed()
        );
        assert!(c.coord.read(|s| s.silent_for("n0")).await.unwrap() < LIVENESS);
        c.kill("n3").await;
        assert!(!alive_now(&c, "n3").await);
        let silent = c.coord.read(|s| s.silent_for("n3")).await.unwrap();
        assert!(silent < LIVENESS / 2, "killed just now, silent {silent:?}");
        assert_eq!(c.coord.read(|s| s.silent_for("n9")).await, None, "never heard");
    }

    /// The coordinator cut off from every agent for longer than the liveness period: when the
    /// link is back, each agent's old connection may deliver a heartbeat it held up and then
    /// end (the agent gave it up and opens a new session). That must not cost the node its
    /// reconnection time: it stays alive, and no recovery declares it lost (found by the
    /// fault suite: four members declared lost, and a restart from the flush that threw the
    /// committed epoch away).
    #[tokio::test(start_paused = true)]
    async fn an_old_connection_ending_after_the_coordinators_own_silence_loses_no_node() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        let sessions: Vec<(String, u64)> = (0..6)
            .map(|i| format!("n{i}"))
            .map(|n| (n.clone(), c.session_of(&n)))
            .collect();
        for (node, _) in &sessions {
            c.stop(node);
        }
        tokio::time::sleep(LIVENESS + LIVENESS / 2).await;
        assert!(
            c.coord.read(|s| s.isolation()).await.is_some(),
            "the coordinator is silent"
        );
        let (first, first_session) = sessions[0].clone();
        c.coord
            .read(move |s| s.heard_from(&first, first_session))
            .await
            .unwrap();
        for (node, session) in sessions[1..].iter().cloned() {
            c.coord
                .read(move |s| {
                    s.heard_from(&node, session).unwrap();
                    s.end_session(&node, session);
                })
                .await;
        }
        assert_eq!(
            c.coord.alive().await.len(),
            6,
            "a node was lost to its old connection's end"
        );
    }

    /// An agent stopped past its liveness period misses the decisions made meanwhile (its
    /// connection may stay open throughout): when it is heard again its session ends, so
    /// that it registers again and resolves them. One that missed none is simply alive again.
    #[tokio::test(start_paused = true)]
    async fn an_agent_that_missed_a_decision_while_counted_dead_must_register_again() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        let (n2, n3) = (c.session_of("n2"), c.session_of("n3"));
        c.stop("n2");
        c.stop("n3");
        let stopped = Instant::now();
        while alive_now(&c, "n2").await || alive_now(&c, "n3").await {
            assert!(stopped.elapsed() < 10 * LIVENESS, "still alive");
            tokio::time::sleep(LIVENESS / 10).await;
        }
        c.coord.read(move |s| s.heard_from("n3", n3)).await.unwrap();
        assert!(alive_now(&c, "n3").await, "n3 missed nothing: alive again");
        c.coord.send_commit(7, &[], true, None).await;
        let why = c.coord.read(|s| s.not_alive("n2")).await.unwrap();
        assert!(why.contains("missed the decision on epoch 7"), "{why}");
        let e = c.coord.read(move |s| s.heard_from("n2", n2)).await.unwrap_err();
        assert!(e.to_string().contains("register again"), "{e}");
        let why = c.coord.read(|s| s.not_alive("n2")).await.unwrap();
        assert_eq!(why, "down: its agent is gone", "its session ended");
        c.join("n2").await;
        assert!(alive_now(&c, "n2").await, "registered again, it is welcome back");
    }

    /// A decision sent as the coordinator's link went down reaches no agent before the
    /// silence is a liveness period old: nobody is declared dead for it (the heartbeats
    /// judge), while an agent that alone missed a decision others were told must register
    /// again before it counts as alive.
    #[tokio::test(start_paused = true)]
    async fn a_decision_nobody_was_told_declares_nobody_dead() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        assert!(
            c.coord.read(|s| s.isolation()).await.is_none(),
            "everyone heard just now"
        );
        for i in 0..6 {
            let (node, session) = (format!("n{i}"), c.session_of(&format!("n{i}")));
            c.coord
                .read(move |s| s.missed_decision(&node, session, 7, true))
                .await;
        }
        for i in 0..6 {
            assert!(alive_now(&c, &format!("n{i}")).await, "n{i} was declared dead");
        }
        let n4 = c.session_of("n4");
        c.coord.read(move |s| s.missed_decision("n4", n4, 8, false)).await;
        assert!(!alive_now(&c, "n4").await, "n4 alone missed epoch 8");
    }

    /// A decision that no agent is told because the coordinator's own link is cut (it hears
    /// nobody) declares nobody dead: each agent stays alive, is told to register again when
    /// heard, and its new registration finds it alive still.
    #[tokio::test(start_paused = true)]
    async fn agents_that_missed_a_decision_during_the_coordinators_silence_stay_alive() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        let n2 = c.session_of("n2");
        for i in 0..6 {
            c.stop(&format!("n{i}"));
        }
        tokio::time::sleep(2 * LIVENESS).await;
        assert!(
            c.coord.read(|s| s.isolation()).await.is_some(),
            "the coordinator hears nobody"
        );
        // As `send_commit` marks each agent whose request failed (here at once: a request
        // to a stopped agent waits out its deadline, longer than this test's grace).
        for i in 0..6 {
            let (node, session) = (format!("n{i}"), c.session_of(&format!("n{i}")));
            c.coord
                .read(move |s| s.missed_decision(&node, session, 7, false))
                .await;
        }
        for i in 0..6 {
            assert!(alive_now(&c, &format!("n{i}")).await, "n{i} was declared dead");
        }
        let e = c.coord.read(move |s| s.heard_from("n2", n2)).await.unwrap_err();
        assert!(e.to_string().contains("register again"), "{e}");
        assert!(alive_now(&c, "n2").await, "alive until it registers again");
        c.join("n2").await;
        assert!(alive_now(&c, "n2").await, "registered again");
    }

    /// An agent stopped past its liveness and replaced meanwhile (another agent registered
    /// as its node, with a new store) is told, when it heartbeats again over its old
    /// session, that the session is no longer the node's; registering again, it is refused
    /// as a second agent of the node, and exits.
    #[tokio::test(start_paused = true)]
    async fn an_agent_replaced_while_stopped_is_refused_when_it_continues() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        let old = c.session_of("n2");
        c.stop("n2");
        let stopped = Instant::now();
        while alive_now(&c, "n2").await {
            assert!(stopped.elapsed() < 10 * LIVENESS, "still alive");
            tokio::time::sleep(LIVENESS / 10).await;
        }
        let mut replacement = registration("n2", "token-of-a-new-store", 77);
        replacement.fresh = true;
        c.register(replacement).await.0.unwrap();
        let e = c.coord.read(move |s| s.heard_from("n2", old)).await.unwrap_err();
        assert!(e.to_string().contains("no longer the node's"), "{e}");
        let (again, _) = c.register(registration("n2", "token-n2", 1)).await;
        let e = again.unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Fenced, "{e}");
    }

    /// Stops the heartbeats of all `nodes` nodes and waits until the grace has passed and
    /// none is alive; when they were stopped.
    async fn silence_every_node(c: &TestCluster, nodes: usize) -> Instant {
        for i in 0..nodes {
            c.stop(&format!("n{i}"));
        }
        let stopped = Instant::now();
        while !c.coord.alive().await.is_empty() {
            assert!(stopped.elapsed() < 10 * LIVENESS, "still alive past the grace");
            tokio::time::sleep(LIVENESS / 10).await;
        }
        stopped
    }

    /// Past the partition grace, a coordinator that hears nobody declares its nodes dead
    /// but awaits them: none is lost before the link is back, and once it hears an agent
    /// again each of the others has an agent's reconnection to register — one whose old
    /// connection ended meanwhile too (found by an attack: a recovery asked as the link
    /// came back declared a whole group lost, and seconds later every node was back whole).
    #[tokio::test(start_paused = true)]
    async fn nodes_silenced_past_the_grace_are_awaited_until_they_register_again() {
        let c = TestCluster::with_grace(6, CodingConfig::default(), LIVENESS).await;
        let n5 = c.session_of("n5");
        silence_every_node(&c, 6).await;
        let awaited = |c: &TestCluster| {
            let coord = c.coord.clone();
            async move { coord.read(|s| s.awaited()).await }
        };
        assert_eq!(
            awaited(&c).await,
            names(6).into_iter().collect(),
            "down, not lost"
        );
        c.coord.read(move |s| s.end_session("n5", n5)).await;
        assert!(
            awaited(&c).await.contains("n5"),
            "an old connection ending during the silence is not the agent"
        );
        c.join("n0").await;
        let others: BTreeSet<String> = names(6).into_iter().skip(1).collect();
        assert_eq!(
            awaited(&c).await,
            others,
            "the link is back: the others may register"
        );
        for node in ["n1", "n2", "n3", "n4"] {
            c.join(node).await;
        }
        assert_eq!(awaited(&c).await, BTreeSet::from(["n5".to_string()]));
    }

    /// While the coordinator still hears nobody, it awaits its nodes for one more grace and
    /// an agent's reconnection at most: a cluster whose every node died is judged lost in the
    /// end (a job then restarts from its flush, or ends).
    #[tokio::test(start_paused = true)]
    async fn a_coordinator_that_hears_nobody_awaits_its_nodes_one_more_grace_at_most() {
        let c = TestCluster::with_grace(6, CodingConfig::default(), LIVENESS).await;
        let stopped = silence_every_node(&c, 6).await;
        assert!(!c.coord.read(|s| s.awaited()).await.is_empty());
        let bound = c
            .coord
            .read(|s| 3 * s.deadlines.liveness() + s.deadlines.reconnection())
            .await;
        while !c.coord.read(|s| s.awaited()).await.is_empty() {
            assert!(stopped.elapsed() < bound + 5 * LIVENESS, "awaited for ever");
            tokio::time::sleep(LIVENESS / 10).await;
        }
        assert!(
            stopped.elapsed() >= 2 * LIVENESS,
            "no longer awaited {:?} after the silence began",
            stopped.elapsed()
        );
    }

    async fn alive_now(c: &TestCluster, node: &str) -> bool {
        c.coord.alive().await.contains_key(node)
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    #[test]
    fn a_node_missing_committed_ranks_or_parity_is_damaged() {
        let mut j = Journal::new(CodingConfig::default(), &names(6), &[]);
        assert_eq!(
            missing(&j, "n0", &Inventory::default()),
            None,
            "nothing committed yet"
        );
        j.committed = 5;
        j.placement.insert(0, "n0".into());
        j.placement.insert(1, "n0".into());
        let whole = Inventory {
            ranks: vec![(0, Some(5)), (1, Some(5))],
            objects: Vec::new(),
        };
        assert_eq!(missing(&j, "n0", &whole), None);
        let behind = Inventory {
            ranks: vec![(0, Some(4))],
            objects: Vec::new(),
        };
        let what = missing(&j, "n0", &behind).unwrap().what;
        assert!(
            what.contains("rank 0 is at epoch 4") && what.contains("rank 1"),
            "{what}"
        );
        assert_eq!(missing(&j, "n1", &Inventory::default()), None, "n1 holds no rank");
    }
}
