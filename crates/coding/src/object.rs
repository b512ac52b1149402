//! The name of a coded object: one group's code over one epoch.

use serde::{Deserialize, Serialize};

/// A coded object: one group's code over one epoch (the first epoch of a stripe chain or of
/// an update lineage names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectId {
    /// Group id (a new id each time groups are formed).
    pub group: u64,
    /// Epoch the object was created for.
    pub epoch: u64,
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "g{}-e{}", self.group, self.epoch)
    }
}

impl ObjectId {
    /// Reads back what [`Display`](std::fmt::Display) writes (`g<G>-e<E>`), as directory
    /// names carry it.
    pub fn parse(s: &str) -> Option<ObjectId> {
        let (g, e) = s.strip_prefix('g')?.split_once("-e")?;
        Some(ObjectId {
            group: g.parse().ok()?,
            epoch: e.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_what_display_writes() {
        let id = ObjectId { group: 7, epoch: 42 };
        assert_eq!(ObjectId::parse(&id.to_string()), Some(id));
        assert_eq!(ObjectId::parse("g7-x42"), None);
        assert_eq!(ObjectId::parse("g-e1"), None);
    }
}
