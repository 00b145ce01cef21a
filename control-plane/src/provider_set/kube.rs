//! `rakazo serve`'s flags of the `kubernetes` provider (docs/kubernetes.md) and their checks.
//!
//! The cluster is reached through `RAKAZO_KUBECONFIG` (or `--kubeconfig`), else kube's own
//! inference: `KUBECONFIG`, `~/.kube/config`, or the in-cluster service account.

use anyhow::bail;
use clap::Args;
use providers::kubernetes::{parse_toleration, KubeConfig, KubeMode};
use providers::MachineLimits;
use std::path::PathBuf;

/// The kubernetes provider's flags.
#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// A kubeconfig file for the kubernetes provider (default: KUBECONFIG, ~/.kube/config, or
    /// the in-cluster service account).
    #[arg(long = "kubeconfig", env = "RAKAZO_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context (default: its current context).
    #[arg(long, env = "RAKAZO_KUBE_CONTEXT")]
    pub kube_context: Option<String>,
    /// The namespace kubernetes computers live in.
    #[arg(long, env = "RAKAZO_KUBE_NAMESPACE", default_value = "rakazo")]
    pub kube_namespace: String,
    /// The image kubernetes computers run (`rakazo image build`, pushed to a registry the
    /// cluster pulls from).
    #[arg(long, env = "RAKAZO_KUBE_IMAGE")]
    pub kube_image: Option<String>,
    /// `pod` (a Pod, a PersistentVolumeClaim and a Secret per computer) or `sandbox` (an
    /// agent-sandbox `Sandbox` per computer; its CRDs and controller must be installed).
    #[arg(long, env = "RAKAZO_KUBE_MODE", default_value = "pod")]
    pub kube_mode: String,
    /// The storage class of the computers' home claims (default: the cluster's default).
    #[arg(long, env = "RAKAZO_KUBE_STORAGE_CLASS")]
    pub kube_storage_class: Option<String>,
    /// The size of a computer's home claim.
    #[arg(long, env = "RAKAZO_KUBE_HOME_SIZE", default_value = "10Gi")]
    pub kube_home_size: String,
    /// The pods' runtimeClassName (gVisor, Kata).
    #[arg(long, env = "RAKAZO_KUBE_RUNTIME_CLASS")]
    pub kube_runtime_class: Option<String>,
    /// The pods' node selector, KEY=VALUE, comma-separated.
    #[arg(long, env = "RAKAZO_KUBE_NODE_SELECTOR", value_delimiter = ',')]
    pub kube_node_selector: Vec<String>,
    /// The pods' tolerations, KEY[=VALUE][:EFFECT], comma-separated.
    #[arg(long, env = "RAKAZO_KUBE_TOLERATIONS", value_delimiter = ',')]
    pub kube_tolerations: Vec<String>,
    /// The container's imagePullPolicy (Always, IfNotPresent, Never; default: the cluster's).
    #[arg(long, env = "RAKAZO_KUBE_IMAGE_PULL_POLICY")]
    pub kube_image_pull_policy: Option<String>,
    /// The user a kubernetes guest drops to after reading its token (`none`: it stays root).
    #[arg(long, env = "RAKAZO_KUBE_RUN_AS", default_value = "rakazo")]
    pub kube_run_as: String,
    /// Default memory limit (and request) of a kubernetes computer, MiB.
    #[arg(long, env = "RAKAZO_KUBE_MEMORY_MB")]
    pub kube_memory_mb: Option<u64>,
    /// Default CPU limit (and request) of a kubernetes computer, in thousandths of a CPU.
    #[arg(long, env = "RAKAZO_KUBE_CPU_MILLIS")]
    pub kube_cpu_millis: Option<u32>,
    /// Default `/dev/shm` size of a kubernetes computer, MiB (256 when unset).
    #[arg(long, env = "RAKAZO_KUBE_SHM_MB")]
    pub kube_shm_mb: Option<u64>,
}

/// A Kubernetes quantity as `--kube-home-size` takes it: digits and a binary or decimal suffix.
fn quantity(s: &str) -> bool {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &s[digits.len()..];
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && ["", "Ki", "Mi", "Gi", "Ti", "Pi", "k", "M", "G", "T", "P"].contains(&suffix)
}

/// A DNS subdomain (a storage or runtime class).
fn dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

impl KubeArgs {
    /// Checks the flags; the guest's environment is filled in when the provider is built.
    pub fn resolve(&self) -> anyhow::Result<KubeConfig> {
        let Some(image) = self.kube_image.clone().filter(|i| !i.trim().is_empty()) else {
            bail!("the kubernetes provider needs --kube-image (RAKAZO_KUBE_IMAGE)");
        };
        let namespace = self.kube_namespace.trim();
        let label = namespace.len() <= 63 && dns_subdomain(namespace) && !namespace.contains('.');
        if !label {
            bail!("--kube-namespace {namespace:?} is not a namespace name (a DNS label)");
        }
        let mut c = KubeConfig::new(namespace, image.trim());
        c.kubeconfig = self
            .kubeconfig
            .clone()
            .filter(|p| !p.as_os_str().is_empty());
        c.context = self.kube_context.clone().filter(|s| !s.trim().is_empty());
        c.mode = KubeMode::parse(self.kube_mode.trim())
            .map_err(|e| anyhow::anyhow!("--kube-mode: {e}"))?;
        let class = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<String>> {
            match v.as_deref().map(str::trim) {
                None | Some("") => Ok(None),
                Some(s) if dns_subdomain(s) => Ok(Some(s.to_string())),
                Some(s) => bail!("--{flag} {s:?} is not a class name (a DNS subdomain)"),
            }
        };
        c.storage_class = class("kube-storage-class", &self.kube_storage_class)?;
        c.runtime_class = class("kube-runtime-class", &self.kube_runtime_class)?;
        if !quantity(self.kube_home_size.trim()) {
            bail!(
                "--kube-home-size {:?} is not a size like 10Gi or 500Mi",
                self.kube_home_size
            );
        }
        c.home_size = self.kube_home_size.trim().to_string();
        for kv in self
            .kube_node_selector
            .iter()
            .filter(|s| !s.trim().is_empty())
        {
            let Some((k, v)) = kv.trim().split_once('=') else {
                bail!("--kube-node-selector {kv:?}: expected KEY=VALUE");
            };
            if k.is_empty() {
                bail!("--kube-node-selector {kv:?}: the key is empty");
            }
            c.node_selector.insert(k.to_string(), v.to_string());
        }
        for t in self
            .kube_tolerations
            .iter()
            .filter(|s| !s.trim().is_empty())
        {
            c.tolerations.push(
                parse_toleration(t.trim())
                    .map_err(|e| anyhow::anyhow!("--kube-tolerations: {e}"))?,
            );
        }
        c.image_pull_policy = match self.kube_image_pull_policy.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(p @ ("Always" | "IfNotPresent" | "Never")) => Some(p.to_string()),
            Some(p) => {
                bail!("--kube-image-pull-policy {p:?}: expected Always, IfNotPresent or Never")
            }
        };
        c.run_as = match self.kube_run_as.trim() {
            "none" => None,
            "" | "root" => bail!("--kube-run-as must name the image's user (or be `none`)"),
            user => Some(user.to_string()),
        };
        c.default_limits = MachineLimits {
            memory_mb: self.kube_memory_mb,
            cpu_millis: self.kube_cpu_millis,
            pids: None,
            shm_mb: self.kube_shm_mb,
        };
        c.default_limits
            .validate()
            .map_err(|e| anyhow::anyhow!("kubernetes default limits: {e}"))?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        kube: KubeArgs,
    }

    fn parse(args: &[&str]) -> anyhow::Result<KubeConfig> {
        let mut argv = vec!["rakazo", "--kube-image", "img"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)?.kube.resolve()
    }

    #[test]
    fn kube_flags_are_checked_with_clear_errors() {
        let c = parse(&[
            "--kube-mode",
            "sandbox",
            "--kube-node-selector",
            "pool=computers",
            "--kube-tolerations",
            "dedicated=rakazo:NoSchedule",
            "--kube-runtime-class",
            "gvisor",
        ])
        .unwrap();
        assert_eq!(c.mode, KubeMode::Sandbox);
        assert_eq!(c.node_selector["pool"], "computers");
        assert_eq!(c.runtime_class.as_deref(), Some("gvisor"));
        assert_eq!(c.tolerations.len(), 1);
        for (args, needle) in [
            (&["--kube-mode", "vm"][..], "expected pod or sandbox"),
            (
                &["--kube-namespace", "Bad_NS"][..],
                "is not a namespace name",
            ),
            (&["--kube-home-size", "ten"][..], "is not a size"),
            (&["--kube-node-selector", "nokey"][..], "expected KEY=VALUE"),
            (&["--kube-tolerations", "a:Later"][..], "effect"),
            (&["--kube-run-as", "root"][..], "--kube-run-as"),
            (
                &["--kube-storage-class", "Fast SSD"][..],
                "not a class name",
            ),
            (&["--kube-memory-mb", "1"][..], "memory_mb"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        let e = Cli::try_parse_from(["rakazo"])
            .unwrap()
            .kube
            .resolve()
            .unwrap_err();
        assert!(e.to_string().contains("--kube-image"), "{e}");
    }
}
