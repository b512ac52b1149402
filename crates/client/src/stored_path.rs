//! Paths as the checkpoint's metadata stores them: JSON strings, losslessly. A Unix file name
//! is any bytes but `/` and NUL, and a program may well create `café.txt` in Latin-1 in a
//! protected directory; serde's own path encoding refuses such names (and a checkpoint that
//! refuses them fails for a reason the program cannot see). A UTF-8 path is stored as
//! itself, as before; any other is stored as a NUL followed by its bytes in hex — no path can
//! contain a NUL, so the two never collide, and metadata written before this stays readable.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Marks a path stored as hex bytes.
const BYTES_MARK: char = '\0';

/// A path in checkpoint metadata (a protected file's key, a directory entry).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct StoredPath(pub(crate) PathBuf);

impl StoredPath {
    /// The path as stored text: itself when UTF-8, else the NUL-marked hex of its bytes.
    pub(crate) fn text(path: &Path) -> Cow<'_, str> {
        match path.to_str() {
            Some(text) => Cow::Borrowed(text),
            None => {
                let mut text = String::from(BYTES_MARK);
                for byte in path.as_os_str().as_bytes() {
                    text.push_str(&format!("{byte:02x}"));
                }
                Cow::Owned(text)
            }
        }
    }

    /// The path that [`StoredPath::text`] gave `text`.
    fn from_text(text: &str) -> Result<PathBuf, String> {
        let Some(hex) = text.strip_prefix(BYTES_MARK) else {
            return Ok(PathBuf::from(text));
        };
        if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("stored path {text:?} is neither a path nor hex bytes"));
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| e.to_string()))
            .collect::<Result<Vec<u8>, String>>()?;
        Ok(PathBuf::from(OsStr::from_bytes(&bytes)))
    }
}

impl Serialize for StoredPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&StoredPath::text(&self.0))
    }
}

impl<'de> Deserialize<'de> for StoredPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        StoredPath::from_text(&text)
            .map(StoredPath)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn utf8_paths_are_stored_as_themselves() {
        let path = StoredPath(PathBuf::from("out/résultats.txt"));
        assert_eq!(serde_json::to_string(&path).unwrap(), "\"out/résultats.txt\"");
        assert_eq!(
            serde_json::from_str::<StoredPath>("\"out/résultats.txt\"").unwrap(),
            path
        );
    }

    #[test]
    fn a_latin1_name_round_trips() {
        let path = StoredPath(PathBuf::from(OsStr::from_bytes(b"out/caf\xe9.txt")));
        let json = serde_json::to_string(&path).unwrap();
        assert_eq!(serde_json::from_str::<StoredPath>(&json).unwrap(), path);
    }

    #[test]
    fn malformed_hex_is_refused() {
        for text in ["\"\\u0000abc\"", "\"\\u0000zz\""] {
            assert!(serde_json::from_str::<StoredPath>(text).is_err(), "{text}");
        }
    }

    proptest! {
        #[test]
        fn any_name_without_nul_round_trips(bytes in proptest::collection::vec(1u8..=255, 1..40)) {
            let path = StoredPath(PathBuf::from(OsStr::from_bytes(&bytes)));
            let json = serde_json::to_string(&path).unwrap();
            prop_assert_eq!(serde_json::from_str::<StoredPath>(&json).unwrap(), path);
        }
    }
}
