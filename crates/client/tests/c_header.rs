//! `include/eckpt.h` is what cbindgen generates from the C API: the committed header never
//! drifts from the exported symbols. Regenerate with `ECKPT_BLESS=1`.

use std::path::Path;

#[test]
fn committed_header_matches_the_c_api() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header_path = crate_dir.join("../../include/eckpt.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    if std::env::var_os("ECKPT_BLESS").is_some() {
        std::fs::write(&header_path, &generated).unwrap();
    }
    let committed = std::fs::read(&header_path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/eckpt.h is stale: run ECKPT_BLESS=1 cargo test -p eckpt-client --test c_header"
    );
}
