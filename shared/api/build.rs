//! Compresses the files the API embeds (the web console under `console/` and
//! `openapi.json`) with gzip into `OUT_DIR`, where `include_bytes!` takes them: about
//! 370 KB of text become about 80 KB of each API function's binary (budget: 8 MB), and
//! browsers and API tools receive them compressed (`crate::gzip`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

fn compress(from: &Path, to: &Path) {
    let data = fs::read(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&data).expect("gzip in memory");
    let gz = encoder.finish().expect("gzip in memory");
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    }
    fs::write(to, gz).unwrap_or_else(|e| panic!("writing {}: {e}", to.display()));
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=openapi.json");
    println!("cargo:rerun-if-changed=console");
    compress(&root.join("openapi.json"), &out.join("openapi.json.gz"));
    let mut files = Vec::new();
    walk(&root.join("console"), &mut files);
    for file in files {
        let relative = file.strip_prefix(&root).expect("under the crate");
        println!("cargo:rerun-if-changed={}", relative.display());
        let mut target = out.join(relative).into_os_string();
        target.push(".gz");
        compress(&file, Path::new(&target));
    }
}
