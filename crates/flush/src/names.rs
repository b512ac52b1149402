//! Item names → file names inside a rank's directory: reversible enough to read at a glance
//! (`mem%2Fgrid`), safe by construction (no `/`, never `.` or `..`, no hidden files, bounded
//! length), and checked on read: a manifest whose `file` is not exactly
//! [`item_file_name`] of its `name` is refused, so no manifest can point outside the epoch.

use xxhash_rust::xxh3::xxh3_64;

/// Longest file name an item gets (bytes): well below the 255 of common file systems.
pub const MAX_FILE_NAME: usize = 200;

/// Bytes of an encoded name kept before the hash when it is too long.
const KEPT: usize = MAX_FILE_NAME - 20;

/// The file an item is flushed to (see the crate documentation).
pub fn item_file_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() <= MAX_FILE_NAME {
        return out;
    }
    let mut cut = KEPT;
    // Never cut inside a `%XX` escape.
    if let Some(p) = out[cut - 2..cut].find('%') {
        cut = cut - 2 + p;
    }
    format!("{}~{:016x}", &out[..cut], xxh3_64(name.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_read_at_a_glance() {
        assert_eq!(item_file_name("mem/grid"), "mem%2Fgrid");
        assert_eq!(item_file_name("eckpt/meta"), "eckpt%2Fmeta");
        assert_eq!(item_file_name("file"), "file");
        assert_eq!(item_file_name("file:out/x.log"), "file%3Aout%2Fx.log");
        assert_eq!(item_file_name(".."), "%2E.");
        assert_eq!(item_file_name("."), "%2E");
    }

    #[test]
    fn long_names_are_cut_and_hashed() {
        let a = "mem/".to_string() + &"x".repeat(400);
        let b = "mem/".to_string() + &"x".repeat(401);
        let (fa, fb) = (item_file_name(&a), item_file_name(&b));
        assert!(fa.len() <= MAX_FILE_NAME && fb.len() <= MAX_FILE_NAME);
        assert_ne!(fa, fb);
        let slashes = "/".repeat(300);
        let f = item_file_name(&slashes);
        assert!(f.len() <= MAX_FILE_NAME, "{f}");
        assert!(!f.contains("%2~") && !f.contains("%~"), "{f}");
    }

    proptest! {
        #[test]
        fn file_names_are_safe(name in ".{1,300}") {
            let f = item_file_name(&name);
            prop_assert!(!f.is_empty() && f.len() <= MAX_FILE_NAME);
            prop_assert!(!f.contains('/') && !f.starts_with('.'));
            prop_assert!(f.bytes().all(|b| b.is_ascii_graphic()));
        }
    }
}
