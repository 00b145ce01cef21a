//! The image computers run, layered on an engine without a registry.
//!
//! Two content-addressed tags:
//! - `rakazo-computer-base:<base hash>`: the root filesystem tar (built by `image/rootfs.sh`,
//!   whose hash names it), imported through `POST /images/create?fromSrc=-`;
//! - `rakazo-computer:<hash16>`: the base plus the guest binary at `/usr/local/bin/rakazo-guest`,
//!   where `hash16` is the first 16 hex digits of `sha256(<base tag> + <sha256 of the guest
//!   binary in hex>)`. It is made by uploading the binary into a created (never started)
//!   container of the base and committing it.
//!
//! A tag the engine already has is used as is, so a second [`ensure_image`] does no work.
//! Building the root filesystem tar is not this module's job. An engine that lacks the image
//! gets it from one that has it ([`copy_image`]: exported and loaded through the Engine API).

use super::engine::{unavailable, within, Failure};
use super::tar::{self, Header, Kind};
use super::{GUEST_PATH, HOME_DIR, PATH_ENV};
use crate::ProviderError;
use bollard::models::{ContainerConfig, ContainerCreateBody};
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, CreateContainerOptionsBuilder, CreateImageOptionsBuilder,
    ImportImageOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use bytes::Bytes;
use futures_util::{stream, StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tracing::info;

/// Repository of the imported root filesystems.
pub const BASE_REPO: &str = "rakazo-computer-base";
/// Repository of the images computers run.
pub const IMAGE_REPO: &str = "rakazo-computer";
/// Deadline of an import or a commit: a full root filesystem is nearly 1 GB.
const BUILD_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Deadline of the small calls around them.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What the computer image is made of.
#[derive(Debug, Clone, Copy)]
pub struct ImageSpec<'a> {
    /// The root filesystem tar (`bash image/rootfs.sh build` prints its path).
    pub rootfs_tar: &'a Path,
    /// The tar's content hash (`bash image/rootfs.sh hash`); names the base image.
    pub base_hash: &'a str,
    /// The static guest binary to layer on top.
    pub guest_bin: &'a Path,
}

/// Serialises builds in this process: two computers asking for the same missing image import
/// it once. Builds in other processes may race; the results have the same content.
static BUILD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether the engine has the image `reference` (a tag or an id), within `deadline`.
pub async fn image_exists(
    docker: &Docker,
    reference: &str,
    deadline: Duration,
) -> Result<bool, ProviderError> {
    let context = format!("inspect image {reference}");
    match within(deadline, &context, docker.inspect_image(reference)).await? {
        Ok(_) => Ok(true),
        Err(e) => match Failure::of(&e) {
            Failure::Missing(_) => Ok(false),
            f => Err(f.into_error(&context)),
        },
    }
}

/// The tag of the base image for a root filesystem hash.
pub fn base_tag(base_hash: &str) -> String {
    format!("{BASE_REPO}:{base_hash}")
}

/// The tag of the computer image for a base tag and the guest binary's sha256 (hex).
pub fn image_tag(base_tag: &str, guest_sha256_hex: &str) -> String {
    let digest = Sha256::digest(format!("{base_tag}{guest_sha256_hex}"));
    format!("{IMAGE_REPO}:{}", &hex::encode(digest)[..16])
}

/// Makes sure the engine has the computer image for `spec` and returns its tag, importing the
/// base and layering the guest only where the engine lacks them. Missing input files are
/// `BadSpec`; an engine that fails is `Unavailable` (or `Capacity` when out of disk).
pub async fn ensure_image(docker: &Docker, spec: &ImageSpec<'_>) -> Result<String, ProviderError> {
    if spec.base_hash.is_empty()
        || !spec
            .base_hash
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || spec.base_hash.len() > 64
    {
        return Err(ProviderError::BadSpec(format!(
            "base hash {:?} is not a usable image tag",
            spec.base_hash
        )));
    }
    let guest_sha = sha256_file(spec.guest_bin).await?;
    let base = base_tag(spec.base_hash);
    let tag = image_tag(&base, &guest_sha);

    let _build = BUILD.lock().await;
    if image_exists(docker, &tag, CALL_TIMEOUT).await? {
        return Ok(tag);
    }
    if !image_exists(docker, &base, CALL_TIMEOUT).await? {
        import_base(docker, spec.rootfs_tar, &base).await?;
    }
    layer_guest(docker, &base, spec.guest_bin, &tag).await?;
    Ok(tag)
}

/// Copies the image `reference` from the engine `from` to the engine `to`: the image archive
/// streams from one engine's export into the other's load, never touching the disk here. Within
/// the build deadline; `Unavailable` if either side fails, or if `to` has no such tag after.
pub async fn copy_image(from: &Docker, to: &Docker, reference: &str) -> Result<(), ProviderError> {
    let began = tokio::time::Instant::now();
    let context = format!("copy image {reference} between docker engines");
    let archive = from
        .export_image(reference)
        .map(|chunk| chunk.map_err(std::io::Error::other));
    let options = ImportImageOptionsBuilder::default().quiet(true).build();
    within(
        BUILD_TIMEOUT,
        &context,
        to.import_image(options, bollard::body_try_stream(archive), None)
            .try_for_each(|_progress| async { Ok(()) }),
    )
    .await?
    .map_err(|e| unavailable(&context, &e))?;
    if !image_exists(to, reference, CALL_TIMEOUT).await? {
        return Err(ProviderError::Unavailable {
            context,
            message: "the load finished but the engine has no such tag".into(),
        });
    }
    info!(
        image = reference,
        elapsed_ms = began.elapsed().as_millis() as u64,
        "image copied between docker engines"
    );
    Ok(())
}

async fn sha256_file(path: &Path) -> Result<String, ProviderError> {
    let mut f = open(path).await?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .await
            .map_err(|e| ProviderError::io(format!("read {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

async fn open(path: &Path) -> Result<tokio::fs::File, ProviderError> {
    tokio::fs::File::open(path).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ProviderError::BadSpec(format!("{} does not exist", path.display()))
        } else {
            ProviderError::io(format!("open {}", path.display()), e)
        }
    })
}

/// Imports the root filesystem tar as `base`, streaming it from disk.
async fn import_base(docker: &Docker, rootfs: &Path, base: &str) -> Result<(), ProviderError> {
    let began = tokio::time::Instant::now();
    let file = open(rootfs).await?;
    let size = file.metadata().await.map(|m| m.len()).unwrap_or(0);
    let body = bollard::body_try_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    // Podman 4.3 ignores `tag` on an import: the whole reference goes in `repo` (Docker splits
    // it the same way when `tag` is empty).
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(base)
        .build();
    let context = format!("import {} as {base}", rootfs.display());
    within(
        BUILD_TIMEOUT,
        &context,
        docker
            .create_image(Some(options), Some(body), None)
            .try_for_each(|_progress| async { Ok(()) }),
    )
    .await?
    .map_err(|e| unavailable(&context, &e))?;
    if !image_exists(docker, base, CALL_TIMEOUT).await? {
        return Err(ProviderError::Unavailable {
            context,
            message: "the import finished but the engine has no such tag".into(),
        });
    }
    info!(
        image = base,
        bytes = size,
        elapsed_ms = began.elapsed().as_millis() as u64,
        "root filesystem imported"
    );
    Ok(())
}

/// Commits `base` plus the guest binary as `tag`, through a created, never started container.
async fn layer_guest(
    docker: &Docker,
    base: &str,
    guest_bin: &Path,
    tag: &str,
) -> Result<(), ProviderError> {
    let began = tokio::time::Instant::now();
    // No labels: a commit keeps the container's labels, and every computer would inherit them.
    // The name lets a later build remove what a crashed one left.
    let name = format!("rakazo-build-{}", tag.rsplit(':').next().unwrap_or("image"));
    remove_build_container(docker, &name).await?;
    let context = format!("create build container {name} from {base}");
    let body = ContainerCreateBody {
        image: Some(base.to_string()),
        // An imported root filesystem has no command, and an engine wants one to create.
        cmd: Some(vec![GUEST_PATH.to_string()]),
        ..Default::default()
    };
    let options = CreateContainerOptionsBuilder::default().name(&name).build();
    let created = within(
        CALL_TIMEOUT,
        &context,
        docker.create_container(Some(options), body),
    )
    .await?
    .map_err(|e| Failure::of(&e).into_error(&context))?;
    let id = created.id;
    let result = upload_and_commit(docker, &id, guest_bin, tag).await;
    // The build container is removed whatever happened; a failure to remove it only leaks a
    // stopped container (the next build removes it by name), so it does not hide the result.
    if let Err(e) = remove_build_container(docker, &id).await {
        tracing::warn!(container = %id, error = %e, "build container not removed");
    }
    result?;
    info!(
        image = tag,
        elapsed_ms = began.elapsed().as_millis() as u64,
        "guest layered onto the base image"
    );
    Ok(())
}

async fn remove_build_container(docker: &Docker, id_or_name: &str) -> Result<(), ProviderError> {
    let context = format!("remove build container {id_or_name}");
    let options = RemoveContainerOptionsBuilder::default().force(true).build();
    match within(
        CALL_TIMEOUT,
        &context,
        docker.remove_container(id_or_name, Some(options)),
    )
    .await?
    {
        Ok(()) => Ok(()),
        Err(e) => match Failure::of(&e) {
            Failure::Missing(_) => Ok(()),
            f => Err(f.into_error(&context)),
        },
    }
}

async fn upload_and_commit(
    docker: &Docker,
    id: &str,
    guest_bin: &Path,
    tag: &str,
) -> Result<(), ProviderError> {
    let file = open(guest_bin).await?;
    let size = file
        .metadata()
        .await
        .map_err(|e| ProviderError::io(format!("stat {}", guest_bin.display()), e))?
        .len();
    let header = Header {
        path: &GUEST_PATH[1..],
        mode: 0o755,
        size,
        kind: Kind::File,
    }
    .encode();
    let mut trailer = vec![0u8; tar::padding(size)];
    trailer.extend_from_slice(&tar::END);
    let archive = stream::once(async move { Ok(Bytes::copy_from_slice(&header)) })
        .chain(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20))
        .chain(stream::once(async move { Ok(Bytes::from(trailer)) }));
    let context = format!("upload {} into build container {id}", guest_bin.display());
    let options = UploadToContainerOptionsBuilder::default().path("/").build();
    within(
        BUILD_TIMEOUT,
        &context,
        docker.upload_to_container(id, Some(options), bollard::body_try_stream(archive)),
    )
    .await?
    .map_err(|e| Failure::of(&e).into_error(&context))?;

    let (repo, version) = tag.split_once(':').unwrap_or((tag, "latest"));
    let options = CommitContainerOptionsBuilder::default()
        .container(id)
        .repo(repo)
        .tag(version)
        .pause(false)
        // Podman's compat commit ignores the config body and applies only these; Docker applies
        // both. One instruction a line.
        .changes(&format!(
            "CMD [\"{GUEST_PATH}\"]\nUSER root\nWORKDIR {HOME_DIR}\nENV LANG=C.UTF-8"
        ))
        .build();
    let config = ContainerConfig {
        cmd: Some(vec![GUEST_PATH.to_string()]),
        user: Some("root".to_string()),
        working_dir: Some(HOME_DIR.to_string()),
        env: Some(vec![PATH_ENV.to_string(), "LANG=C.UTF-8".to_string()]),
        ..Default::default()
    };
    let context = format!("commit build container {id} as {tag}");
    within(
        BUILD_TIMEOUT,
        &context,
        docker.commit_container(options, config),
    )
    .await?
    .map_err(|e| Failure::of(&e).into_error(&context))?;
    if !image_exists(docker, tag, CALL_TIMEOUT).await? {
        return Err(ProviderError::Unavailable {
            context,
            message: "the commit finished but the engine has no such tag".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_content_addressed() {
        let base = base_tag("0123456789abcdef");
        assert_eq!(base, "rakazo-computer-base:0123456789abcdef");
        let a = image_tag(&base, &"a".repeat(64));
        assert!(a.starts_with("rakazo-computer:"));
        assert_eq!(a.len(), "rakazo-computer:".len() + 16);
        assert_eq!(a, image_tag(&base, &"a".repeat(64)));
        assert_ne!(a, image_tag(&base, &"b".repeat(64)));
        assert_ne!(a, image_tag(&base_tag("x"), &"a".repeat(64)));
    }
}
