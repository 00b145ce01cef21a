//! `rakazo image build`: the computer image for the docker provider.
//!
//! Two layers, both content-addressed so nothing unchanged is rebuilt: the root filesystem from
//! Debian packages (`image/rootfs.sh`, cached outside the checkout, imported into the engine as
//! `rakazo-computer-base:<recipe hash>`), and the static guest on top of it
//! (`rakazo-computer:<hash of base and guest>`), committed through the Engine API. Nothing is
//! pulled from a registry.

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Build (or find) the computer image on a Docker engine; prints its tag.
    Build {
        /// The image recipe directory (holds rootfs.sh and packages.txt).
        #[arg(long, default_value = "image")]
        recipe: PathBuf,
        /// A root filesystem tar to use instead of building the recipe's.
        #[arg(long)]
        rootfs: Option<PathBuf>,
        /// The static rakazo-guest binary to bake in (default: beside this binary).
        #[arg(long, env = "RAKAZO_GUEST_BIN")]
        guest: Option<PathBuf>,
        /// The Docker Engine API socket.
        #[arg(
            long,
            env = "RAKAZO_DOCKER_SOCKET",
            default_value = "/var/run/docker.sock"
        )]
        docker_socket: PathBuf,
    },
}

/// Runs `rakazo image build`; `json` (the global `--json`) prints `{"image": …}` instead of
/// the bare tag.
pub async fn run(cmd: ImageCmd, json: bool) -> Result<i32> {
    let ImageCmd::Build {
        recipe,
        rootfs,
        guest,
        docker_socket,
    } = cmd;
    let guest = match guest {
        Some(g) => g,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("rakazo-guest"))
            .context("cannot locate rakazo-guest; pass --guest")?,
    };
    check_static(&guest)?;
    let (rootfs, base_hash) = match rootfs {
        Some(tar) => {
            let hash = file_hash16(&tar)?;
            (tar, hash)
        }
        None => build_rootfs(&recipe)?,
    };
    let engine = providers::docker::engine::connect_engine(&docker_socket, Duration::from_secs(10))
        .await
        .with_context(|| {
            format!(
                "connect to the Docker engine at {}",
                docker_socket.display()
            )
        })?;
    let tag = providers::docker::image::ensure_image(
        &engine,
        &providers::docker::image::ImageSpec {
            rootfs_tar: &rootfs,
            base_hash: &base_hash,
            guest_bin: &guest,
        },
    )
    .await
    .with_context(|| format!("build the image on {}", docker_socket.display()))?;
    if json {
        // What `image build --json` prints.
        #[derive(serde::Serialize)]
        struct Built<'a> {
            image: &'a str,
        }
        println!("{}", serde_json::to_string(&Built { image: &tag })?);
    } else {
        println!("{tag}");
    }
    Ok(0)
}

/// Runs the recipe's `rootfs.sh build` (a no-op when its tar is cached); returns the tar and
/// the recipe hash it is named by.
fn build_rootfs(recipe: &Path) -> Result<(PathBuf, String)> {
    let script = recipe.join("rootfs.sh");
    if !script.is_file() {
        bail!(
            "no image recipe at {} (run from the checkout, or pass --recipe or --rootfs)",
            script.display()
        );
    }
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg("build")
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} build failed ({})", script.display(), out.status);
    }
    let path = String::from_utf8(out.stdout).context("rootfs.sh printed a non-UTF-8 path")?;
    let path = PathBuf::from(path.lines().last().unwrap_or("").trim());
    let hash = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.strip_prefix("rootfs-"))
        .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
        .with_context(|| format!("rootfs.sh printed {:?}, not rootfs-<hash>.tar", path))?
        .to_string();
    Ok((path, hash))
}

/// The first 16 hex digits of a file's sha256 (for a rootfs tar given by hand).
fn file_hash16(path: &Path) -> Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("read {}", path.display()))?;
    Ok(hex::encode(h.finalize())[..16].to_string())
}

/// Refuses a guest that is not a static executable: the image's libc is not the build host's.
fn check_static(path: &Path) -> Result<()> {
    let bytes =
        std::fs::read(path).with_context(|| format!("read the guest {}", path.display()))?;
    match elf_is_static(&bytes) {
        Some(true) => Ok(()),
        Some(false) => bail!(
            "{} is dynamically linked; build the static guest: cargo build --release \
             --target x86_64-unknown-linux-musl -p guest-agent --bin rakazo-guest",
            path.display()
        ),
        None => bail!("{} is not a 64-bit ELF executable", path.display()),
    }
}

/// Whether a 64-bit little-endian ELF has no program interpreter (`PT_INTERP`); `None` if it
/// is not such an ELF.
fn elf_is_static(b: &[u8]) -> Option<bool> {
    if b.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let p_type = u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?);
        if p_type == 3 {
            return Some(false);
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_static_from_dynamic_executables() {
        // This test binary is dynamically linked (glibc).
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_is_static(&me), Some(false));
        assert_eq!(elf_is_static(b"#!/bin/sh\n"), None);
        assert_eq!(elf_is_static(b""), None);
        // A truncated header is not an ELF we can judge.
        assert_eq!(elf_is_static(&me[..0x30]), None);
    }
}
