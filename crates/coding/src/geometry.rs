//! Where the shards of a coded object sit in a group: for each **row** (one chunk of every
//! shard), which member holds which shard, and which chunk of its own data or parity that
//! is.
//!
//! Members' data shards are cut into chunks; a row holds `k` data chunks and `m` parity
//! chunks, one per shard. In the **dedicated** layout member `x` holds shard `x` in every
//! row (members `0..k` data, `k..k+m` parity). In the **rotated** layout the parity moves one
//! member to the right every row (SCore, RAID-5): in row `r` of a group of `n`, parity shard
//! `i` is held by member `(r + i) mod n` and data shard `l` by member `(r + m + l) mod n`, so
//! going around the ring from the first data holder visits the data shards in order and
//! ends at the parity holders. Every member then holds data in `k` rows and parity in `m`
//! rows of every `n`.

use crate::config::Layout;
use crate::CodingError;

/// Most chunks a member's data shard may have. Every chunk's checksum travels in one control
/// frame (a participant's task report after an encode, the object record of a decode task),
/// and a 64 MiB frame holds far fewer than this many, so no object a cluster can code is
/// refused; a larger count only comes from a malformed task, and would make a participant
/// walk (and allocate checksums for) billions of rows.
pub const MAX_DATA_CHUNKS: u64 = 1 << 24;

/// The row structure of one coded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    k: usize,
    m: usize,
    /// Rows after which the assignment repeats (1 dedicated, `k + m` rotated).
    cycle: usize,
    /// `holders[slot][shard]`: member holding `shard` in rows `≡ slot (mod cycle)`.
    holders: Vec<Vec<usize>>,
    /// Per member, the slots of a cycle in which it holds a data shard, ascending.
    data_slots: Vec<Vec<usize>>,
    /// Per member, the slots of a cycle in which it holds a parity shard, ascending.
    parity_slots: Vec<Vec<usize>>,
    /// Cycles in the object: enough for every member's data.
    cycles: u64,
}

impl Geometry {
    /// [`Geometry::new`] for a shape from outside (a peer's task): refuses `k` or `m` of 0,
    /// more than [`eckpt_codec::MAX_SHARDS`] members and more than [`MAX_DATA_CHUNKS`]
    /// chunks instead of building something absurd.
    pub fn try_new(layout: Layout, k: usize, m: usize, data_chunks: u64) -> Result<Geometry, CodingError> {
        if k == 0 || m == 0 || k.saturating_add(m) > eckpt_codec::MAX_SHARDS {
            return Err(CodingError::Invalid(format!(
                "a group of k={k} m={m}: need k ≥ 1, m ≥ 1 and k + m ≤ {}",
                eckpt_codec::MAX_SHARDS
            )));
        }
        if data_chunks > MAX_DATA_CHUNKS {
            return Err(CodingError::Invalid(format!(
                "{data_chunks} chunks per data shard, at most {MAX_DATA_CHUNKS}"
            )));
        }
        Ok(Geometry::new(layout, k, m, data_chunks))
    }

    /// The geometry for a group of `k + m` members whose longest data shard has
    /// `data_chunks` chunks. For shapes the caller has checked (a validated
    /// [`CodingConfig`](crate::CodingConfig), a group formed from one); a shape read from a
    /// message goes through [`Geometry::try_new`].
    pub fn new(layout: Layout, k: usize, m: usize, data_chunks: u64) -> Geometry {
        let n = k + m;
        let holders: Vec<Vec<usize>> = match layout {
            Layout::Dedicated => vec![(0..n).collect()],
            Layout::Rotated => (0..n)
                .map(|r| {
                    (0..n)
                        .map(|shard| {
                            if shard < k {
                                (r + m + shard) % n
                            } else {
                                (r + shard - k) % n
                            }
                        })
                        .collect()
                })
                .collect(),
        };
        let cycle = holders.len();
        let mut data_slots = vec![Vec::new(); n];
        let mut parity_slots = vec![Vec::new(); n];
        for (slot, row) in holders.iter().enumerate() {
            for (shard, &member) in row.iter().enumerate() {
                if shard < k {
                    data_slots[member].push(slot);
                } else {
                    parity_slots[member].push(slot);
                }
            }
        }
        let per_cycle = data_slots.iter().map(Vec::len).max().unwrap_or(1).max(1) as u64;
        Geometry {
            k,
            m,
            cycle,
            holders,
            data_slots,
            parity_slots,
            cycles: data_chunks.div_ceil(per_cycle),
        }
    }

    /// Data shards per row.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Parity shards per row.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Members of the group.
    pub fn members(&self) -> usize {
        self.k + self.m
    }

    /// Rows in the object.
    pub fn rows(&self) -> u64 {
        self.cycles * self.cycle as u64
    }

    fn slot(&self, row: u64) -> (u64, usize) {
        (row / self.cycle as u64, (row % self.cycle as u64) as usize)
    }

    /// The member holding `shard` (`0..k` data, `k..k+m` parity) in `row`.
    pub fn holder(&self, row: u64, shard: usize) -> usize {
        self.holders[self.slot(row).1][shard]
    }

    /// The shard `member` holds in `row`. `member` must be below [`Geometry::members`], as
    /// for every method taking a member or a shard.
    pub fn shard_at(&self, row: u64, member: usize) -> usize {
        let slot = self.slot(row).1;
        self.holders[slot]
            .iter()
            .position(|&h| h == member)
            .expect("every member holds one shard of every row")
    }

    /// Which chunk of `member`'s data shard sits in `row`, if it holds data there.
    pub fn data_chunk(&self, row: u64, member: usize) -> Option<u64> {
        let (cycle, slot) = self.slot(row);
        let slots = &self.data_slots[member];
        let index = slots.iter().position(|&s| s == slot)?;
        Some(cycle * slots.len() as u64 + index as u64)
    }

    /// Which chunk of `member`'s parity file holds its parity of `row`, if any.
    pub fn parity_chunk(&self, row: u64, member: usize) -> Option<u64> {
        let (cycle, slot) = self.slot(row);
        let slots = &self.parity_slots[member];
        let index = slots.iter().position(|&s| s == slot)?;
        Some(cycle * slots.len() as u64 + index as u64)
    }

    /// The row holding chunk `chunk` of `member`'s data shard.
    pub fn data_row(&self, member: usize, chunk: u64) -> u64 {
        let slots = &self.data_slots[member];
        let per = slots.len() as u64;
        (chunk / per) * self.cycle as u64 + slots[(chunk % per) as usize] as u64
    }

    /// Chunks of `member`'s data shard covered by the object (its padded length).
    pub fn data_chunks(&self, member: usize) -> u64 {
        self.cycles * self.data_slots[member].len() as u64
    }

    /// Chunks of parity `member` stores for the object.
    pub fn parity_chunks(&self, member: usize) -> u64 {
        self.cycles * self.parity_slots[member].len() as u64
    }

    /// Whether `member` holds data in some row (in the dedicated layout, parity members do
    /// not and host no ranks).
    pub fn holds_data(&self, member: usize) -> bool {
        !self.data_slots[member].is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_consistency(g: &Geometry) {
        let n = g.members();
        for row in 0..g.rows() {
            let mut seen = vec![false; n];
            for shard in 0..n {
                let h = g.holder(row, shard);
                assert!(!seen[h], "member {h} holds two shards of row {row}");
                seen[h] = true;
                assert_eq!(g.shard_at(row, h), shard);
                if shard < g.k() {
                    let q = g.data_chunk(row, h).expect("data holder has a data chunk");
                    assert_eq!(g.data_row(h, q), row);
                    assert!(g.parity_chunk(row, h).is_none());
                } else {
                    assert!(g.data_chunk(row, h).is_none());
                    assert!(g.parity_chunk(row, h).unwrap() < g.parity_chunks(h));
                }
            }
        }
        for member in 0..n {
            // Data chunks map to distinct rows, and parity chunks are used exactly once.
            let rows: std::collections::BTreeSet<u64> = (0..g.data_chunks(member))
                .map(|q| g.data_row(member, q))
                .collect();
            assert_eq!(rows.len() as u64, g.data_chunks(member));
            let parity: std::collections::BTreeSet<u64> =
                (0..g.rows()).filter_map(|r| g.parity_chunk(r, member)).collect();
            assert_eq!(parity.len() as u64, g.parity_chunks(member));
        }
    }

    #[test]
    fn dedicated_members_keep_their_shard() {
        let g = Geometry::new(Layout::Dedicated, 4, 2, 10);
        assert_eq!(g.rows(), 10);
        for row in 0..10 {
            for shard in 0..6 {
                assert_eq!(g.holder(row, shard), shard);
            }
            assert_eq!(g.data_chunk(row, 2), Some(row));
            assert_eq!(g.parity_chunk(row, 5), Some(row));
        }
        assert!(!g.holds_data(4));
        assert_eq!(g.data_chunks(0), 10);
        check_consistency(&g);
    }

    #[test]
    fn rotated_parity_walks_the_ring() {
        let g = Geometry::new(Layout::Rotated, 3, 2, 7);
        // 7 chunks per member at 3 data rows per cycle of 5: 3 cycles.
        assert_eq!(g.rows(), 15);
        assert_eq!(g.data_chunks(0), 9);
        assert_eq!(g.parity_chunks(0), 6);
        for row in 0..g.rows() {
            let r = row as usize;
            assert_eq!(g.holder(row, 3), r % 5, "first parity");
            assert_eq!(g.holder(row, 4), (r + 1) % 5, "second parity");
            // Data in ring order right after the parity holders.
            for l in 0..3 {
                assert_eq!(g.holder(row, l), (r + 2 + l) % 5);
            }
        }
        for member in 0..5 {
            assert!(g.holds_data(member));
        }
        check_consistency(&g);
    }

    #[test]
    fn shapes_from_outside_are_checked() {
        assert!(Geometry::try_new(Layout::Rotated, 4, 2, 10).is_ok());
        for (k, m, chunks) in [
            (0, 2, 1),
            (4, 0, 1),
            (200, 100, 1),
            (usize::MAX, 1, 1),
            (4, 2, u64::MAX),
        ] {
            let err = Geometry::try_new(Layout::Rotated, k, m, chunks).unwrap_err();
            assert!(matches!(err, CodingError::Invalid(_)), "{k}+{m}, {chunks}: {err}");
        }
    }

    #[test]
    fn every_shape_is_consistent() {
        for layout in [Layout::Dedicated, Layout::Rotated] {
            for (k, m) in [(1, 1), (2, 1), (4, 2), (5, 3), (10, 4)] {
                for chunks in [0, 1, 5, 17] {
                    check_consistency(&Geometry::new(layout, k, m, chunks));
                }
            }
        }
    }
}
