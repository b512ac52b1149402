//! The sealed JSON format: a JSON object with a `checksum` key holding the CRC-32C of the
//! compact serialization of every other key. One flipped bit (`"committed": 11` → `10`, a
//! parity `version` that decides whether an update is applied) is refused as damage
//! instead of being served.
//!
//! The key order of the compact serialization is the order `serde_json` gives an object
//! (sorted), so the checksum is the same whoever writes and whoever reads.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// The key holding the checksum.
pub const CHECKSUM: &str = "checksum";

/// Why sealed bytes were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// Not a JSON object.
    #[error("not a sealed JSON object: {0}")]
    NotJson(String),
    /// No checksum key (written by a version that did not seal it).
    #[error("no checksum: not a sealed file (written by an older eckpt?)")]
    NoChecksum,
    /// The contents do not match the recorded checksum.
    #[error("checksum mismatch (recorded {recorded}, contents {actual}): the file was damaged")]
    Mismatch {
        /// The checksum recorded in the file.
        recorded: String,
        /// The checksum of the contents as read.
        actual: u32,
    },
    /// Sealed and intact, but not of the expected shape.
    #[error("intact but not what was expected: {0}")]
    Shape(String),
}

fn crc(value: &Value) -> u32 {
    crc32c::crc32c(&serde_json::to_vec(value).expect("a JSON value serializes"))
}

/// `value` with its checksum key (`value` must be a JSON object without one).
fn with_checksum(mut value: Value) -> Value {
    let sum = crc(&value);
    let object = value.as_object_mut().expect("only objects are sealed");
    assert!(
        !object.contains_key(CHECKSUM),
        "a sealed object has no key {CHECKSUM}"
    );
    object.insert(CHECKSUM.into(), sum.into());
    value
}

/// `value` as a sealed object (`value` must serialize to a JSON object without a
/// `checksum` key).
pub fn seal_value(value: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(&with_checksum(value)).expect("a JSON value serializes");
    bytes.push(b'\n');
    bytes
}

/// `value` sealed on one line, ended by a newline: a record of a log of lines.
pub fn seal_line<T: Serialize>(value: &T) -> Vec<u8> {
    let value = serde_json::to_value(value).expect("a sealed type serializes");
    // Compact JSON escapes every newline inside strings: the line has one, at its end.
    let mut bytes = serde_json::to_vec(&with_checksum(value)).expect("a JSON value serializes");
    bytes.push(b'\n');
    bytes
}

/// `value` sealed: the bytes to publish.
pub fn seal<T: Serialize>(value: &T) -> Vec<u8> {
    seal_value(serde_json::to_value(value).expect("a sealed type serializes"))
}

/// The object `bytes` hold, without its checksum, once the checksum matches.
pub fn unseal_value(bytes: &[u8]) -> Result<Value, SealError> {
    let mut value: Value = serde_json::from_slice(bytes).map_err(|e| SealError::NotJson(e.to_string()))?;
    let recorded = value
        .as_object_mut()
        .ok_or_else(|| SealError::NotJson("not an object".into()))?
        .remove(CHECKSUM)
        .ok_or(SealError::NoChecksum)?;
    let actual = crc(&value);
    if recorded.as_u64() != Some(u64::from(actual)) {
        return Err(SealError::Mismatch {
            recorded: recorded.to_string(),
            actual,
        });
    }
    Ok(value)
}

/// The `T` that sealed `bytes` hold.
pub fn unseal<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, SealError> {
    serde_json::from_value(unseal_value(bytes)?).map_err(|e| SealError::Shape(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Serialize, Deserialize, PartialEq, Clone)]
    struct Parity {
        version: u64,
        chunk: u32,
        crcs: Vec<u32>,
        name: String,
    }

    fn parity() -> impl Strategy<Value = Parity> {
        (
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec(any::<u32>(), 0..20),
            ".{0,12}",
        )
            .prop_map(|(version, chunk, crcs, name)| Parity {
                version,
                chunk,
                crcs,
                name,
            })
    }

    proptest! {
        #[test]
        fn what_is_sealed_unseals_to_itself(p in parity()) {
            prop_assert_eq!(unseal::<Parity>(&seal(&p)).unwrap(), p);
        }

        /// Any single flipped bit is refused: as damage, or as bytes that are no longer
        /// a sealed object — never as a different value.
        #[test]
        fn a_flipped_bit_is_never_served(p in parity(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut bytes = seal(&p);
            let i = at.index(bytes.len());
            bytes[i] ^= 1 << bit;
            if let Ok(read) = unseal::<Parity>(&bytes) {
                prop_assert_eq!(read, p, "a flip that changes nothing (whitespace) may pass");
            }
        }
    }

    #[test]
    fn a_changed_value_is_refused_naming_both_checksums() {
        let p = Parity {
            version: 3,
            chunk: 4096,
            crcs: vec![1, 2],
            name: "g0".into(),
        };
        let text = String::from_utf8(seal(&p))
            .unwrap()
            .replace("\"version\": 3", "\"version\": 4");
        let e = unseal::<Parity>(text.as_bytes()).unwrap_err();
        assert!(matches!(e, SealError::Mismatch { .. }), "{e}");
        assert!(e.to_string().contains("damaged"), "{e}");
    }

    #[test]
    fn unsealed_json_is_refused_as_such() {
        assert_eq!(
            unseal::<Parity>(br#"{"version": 3}"#).unwrap_err(),
            SealError::NoChecksum
        );
        assert!(matches!(
            unseal::<Parity>(b"[1]").unwrap_err(),
            SealError::NotJson(_)
        ));
    }
}
