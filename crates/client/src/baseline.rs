//! The rollback point of append files before a rank's first checkpoint commits: their length
//! when first protected. A run killed before it checkpointed leaves lines in its append files
//! that a fresh start would keep (and write again); the length at protect time is recorded
//! durably, once per rank and file, so the next run's fresh start cuts them off as a restart
//! from a checkpoint would.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files::{self, FileMode, Protected};
use crate::stored_path::StoredPath;
use crate::Error;

/// What the record file holds: append file key → its length when first protected.
#[derive(Default, Serialize, Deserialize)]
struct Lengths {
    append: BTreeMap<StoredPath, u64>,
}

/// One rank's record, `append-baseline.<R>.json` in a directory that outlives the rank's
/// processes (the store root; the cluster directory in cluster mode).
pub(crate) struct Baseline {
    path: PathBuf,
}

impl Baseline {
    pub(crate) fn new(dir: &Path, rank: u32) -> Baseline {
        Baseline {
            path: eckpt_cluster_api::dirs::append_baseline_file(dir, rank),
        }
    }

    fn load(&self) -> Result<Lengths, Error> {
        match fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::Mismatch(format!("{} is unreadable: {e}", self.path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Lengths::default()),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }

    /// Records `file`'s length now (0 if it does not exist yet), unless an earlier run
    /// recorded one: the first protect is the rollback point until a checkpoint commits.
    pub(crate) fn record(&self, file: &Protected) -> Result<(), Error> {
        let mut lengths = self.load()?;
        let key = StoredPath(file.key.clone());
        if lengths.append.contains_key(&key) {
            return Ok(());
        }
        let len = files::regular_file_len(&file.path)?.unwrap_or(0);
        lengths.append.insert(key, len);
        self.save(&lengths)
    }

    /// Writes the record crash-safely ([`eckpt_durable::write_atomic`]).
    fn save(&self, lengths: &Lengths) -> Result<(), Error> {
        let bytes = serde_json::to_vec(lengths)
            .map_err(|e| Error::Internal(format!("append lengths do not serialise: {e}")))?;
        eckpt_durable::write_atomic(&self.path, &bytes).map_err(|e| Error::io(&self.path, e))
    }

    /// A fresh start: cuts every protected append file back to its recorded length. Fails,
    /// changing nothing, if one is shorter than recorded (it lost data the run relied on).
    pub(crate) fn cut_back(&self, files: &[(Protected, FileMode)]) -> Result<(), Error> {
        let lengths = self.load()?;
        let mut cuts = Vec::new();
        for (file, _) in files.iter().filter(|(_, m)| *m == FileMode::Append) {
            let Some(&recorded) = lengths.append.get(&StoredPath(file.key.clone())) else {
                continue;
            };
            let Some(len) = files::regular_file_len(&file.path)? else {
                continue;
            };
            if len < recorded {
                return Err(Error::Mismatch(format!(
                    "append file {} has {len} bytes, fewer than the {recorded} it had when first protected",
                    file.path.display()
                )));
            }
            if len > recorded {
                cuts.push((&file.path, recorded));
            }
        }
        for (path, len) in cuts {
            files::cut(path, len)?;
        }
        Ok(())
    }
}
