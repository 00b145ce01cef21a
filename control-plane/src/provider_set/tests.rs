//! Unit tests of `provider_set`.
use super::*;
use clap::Parser;

#[derive(Parser)]
struct T {
    #[command(flatten)]
    p: ProviderArgs,
}

fn resolve(args: &[&str]) -> anyhow::Result<ProviderConfig> {
    resolve_env(args, &[])
}

fn resolve_env(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<ProviderConfig> {
    let mut argv = vec!["t"];
    argv.extend_from_slice(args);
    let env: std::collections::HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    T::try_parse_from(argv)?
        .p
        .resolve_with(&|k| env.get(k).cloned())
}

#[test]
fn defaults_to_local_only() {
    let c = resolve(&[]).unwrap();
    assert_eq!(c.kinds, vec!["local"]);
    assert_eq!(c.default, "local");
    assert!(c.docker.is_none());
}

#[test]
fn several_providers_and_a_default_among_them() {
    let c = resolve(&["--providers", "local,docker", "--docker-image", "img:1"]).unwrap();
    assert_eq!(c.kinds, vec!["local", "docker"]);
    assert_eq!(c.default, "local");
    let c = resolve(&[
        "--providers",
        "local,docker",
        "--default-provider",
        "docker",
        "--docker-image",
        "img:1",
    ])
    .unwrap();
    assert_eq!(c.default, "docker");
    assert_eq!(c.docker.unwrap().image, "img:1");
    assert_eq!(
        c.advertise_addr, None,
        "guests dial the bound address by default"
    );
    let c = resolve(&["--advertise-addr", "10.0.0.7:7443"]).unwrap();
    assert_eq!(c.advertise_addr, Some("10.0.0.7:7443".parse().unwrap()));
    assert!(resolve(&["--advertise-addr", "not-an-address"]).is_err());
}

#[test]
fn refuses_what_cannot_work() {
    let e = resolve(&["--providers", "local,kvm"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown provider \"kvm\""), "{e}");
    let e = resolve(&["--providers", "local", "--default-provider", "fake"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not among --providers"), "{e}");
    let e = resolve(&["--providers", "docker"]).unwrap_err().to_string();
    assert!(e.contains("--docker-image"), "{e}");
    let e = resolve(&[
        "--providers",
        "docker",
        "--docker-image",
        "i",
        "--docker-memory-mb",
        "1",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("memory_mb must be between 16"), "{e}");
}

#[test]
fn docker_containment_is_decided_at_build_unless_named() {
    let docker = |extra: &[&str]| {
        let mut a = vec!["--providers", "docker", "--docker-image", "i"];
        a.extend_from_slice(extra);
        resolve(&a).map(|c| c.docker.unwrap())
    };
    assert_eq!(docker(&[]).unwrap().containment, None);
    assert_eq!(
        docker(&["--docker-containment", "full"])
            .unwrap()
            .containment,
        Some(DockerContainment::Full)
    );
    let d = docker(&["--docker-containment", "off", "--docker-network", "bridge"]).unwrap();
    assert_eq!(
        (d.containment, d.network.as_deref()),
        (Some(DockerContainment::Off), Some("bridge"))
    );
    let e = docker(&["--docker-containment", "jail"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected full, host-network or off"), "{e}");
    // A network of its own is the uncontained setup's: never silently beside containment.
    for extra in [
        &["--docker-network", "host"][..],
        &["--docker-network", "host", "--docker-containment", "full"],
    ] {
        let e = docker(extra).unwrap_err().to_string();
        assert!(e.contains("--docker-containment off only"), "{e}");
    }
}

#[test]
fn docker_engines_are_the_socket_and_named_engines() {
    let engines = |extra: &[&str]| {
        let mut a = vec!["--providers", "docker", "--docker-image", "i"];
        a.extend_from_slice(extra);
        resolve(&a).map(|c| c.docker.unwrap())
    };
    let d = engines(&[]).unwrap();
    assert_eq!(
        d.engines,
        vec![EngineConfig::unix("default", "/var/run/docker.sock")]
    );
    assert_eq!(d.engine_gone_after, std::time::Duration::from_secs(120));
    assert_eq!(
        engines(&["--docker-socket", "/s.sock"]).unwrap().engines,
        vec![EngineConfig::unix("default", "/s.sock")]
    );
    let d = engines(&[
        "--docker-socket",
        "/a.sock",
        "--docker-engine",
        "b=unix:///b.sock,far=tcp://10.1.2.3:2376",
        "--docker-tls-ca",
        "far=/t/ca.pem",
        "--docker-tls-cert",
        "far=/t/cert.pem",
        "--docker-tls-key",
        "far=/t/key.pem",
        "--docker-engine-gone-after-secs",
        "5",
    ])
    .unwrap();
    let names: Vec<&str> = d.engines.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["default", "b", "far"]);
    assert_eq!(
        d.engines[2].endpoint,
        Endpoint::Tls {
            addr: "10.1.2.3:2376".into(),
            tls: TlsFiles {
                ca: "/t/ca.pem".into(),
                cert: "/t/cert.pem".into(),
                key: "/t/key.pem".into(),
            },
        }
    );
    assert_eq!(d.engine_gone_after, std::time::Duration::from_secs(5));
    // Without --docker-socket, the named engines are all.
    let d = engines(&["--docker-engine", "b=unix:///b.sock"]).unwrap();
    assert_eq!(d.engines, vec![EngineConfig::unix("b", "/b.sock")]);

    for (args, says) in [
        (
            vec![
                "--docker-socket",
                "/a",
                "--docker-engine",
                "default=unix:///b",
            ],
            "two docker engines are named default",
        ),
        (
            vec!["--docker-engine", "far=tcp://h:2376"],
            "needs TLS files",
        ),
        (vec!["--docker-engine", "b"], "expected NAME="),
        (vec!["--docker-engine", "B=unix:///b"], "engine name"),
        (
            vec!["--docker-engine", "b=unix:///b", "--docker-tls-ca", "b=/ca"],
            "not a tcp:// docker engine",
        ),
        (vec!["--docker-tls-key", "/key.pem"], "expected NAME=PATH"),
    ] {
        let e = engines(&args).unwrap_err().to_string();
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn sandbox_services_need_a_template_and_a_key_kept_out_of_argv_and_logs() {
    let e = resolve(&["--providers", "e2b"]).unwrap_err().to_string();
    assert!(e.contains("--e2b-template"), "{e}");
    let e = resolve(&["--providers", "e2b", "--e2b-template", "t"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("E2B_API_KEY"), "{e}");
    let key = "e2b_secret_0123456789";
    let c = resolve_env(
        &[
            "--providers",
            "e2b,daytona",
            "--e2b-template",
            "rakazo",
            "--daytona-snapshot",
            "s",
        ],
        &[
            (E2B_KEY_ENV, key),
            (DAYTONA_KEY_ENV, "dtn_secret_0123456789"),
        ],
    )
    .unwrap();
    let e2b = c.e2b.as_ref().unwrap();
    assert_eq!(e2b.api_key.0, key);
    assert_eq!(e2b.api_url.as_str(), "https://api.e2b.app");
    assert_eq!(e2b.run_as.as_deref(), Some("user"));
    assert_eq!(c.daytona.as_ref().unwrap().snapshot, "s");
    let shown = format!("{c:?}");
    assert!(
        !shown.contains(key) && !shown.contains("dtn_secret"),
        "{shown}"
    );

    // A key file must be private.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("key");
    std::fs::write(&file, "k-from-file\n").unwrap();
    let args = |f: &str| {
        vec![
            "--providers".to_string(),
            "daytona".into(),
            "--daytona-snapshot".into(),
            "s".into(),
            "--daytona-api-key-file".into(),
            f.to_string(),
        ]
    };
    let f = file.display().to_string();
    let argv = args(&f);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = resolve(&argv).unwrap_err().to_string();
    assert!(e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        resolve(&argv).unwrap().daytona.unwrap().api_key.0,
        "k-from-file"
    );
}

#[test]
fn sandbox_service_urls_are_https_or_loopback() {
    let base = ["--providers", "e2b", "--e2b-template", "t"];
    let env = [(E2B_KEY_ENV, "k")];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        resolve_env(&a, &env)
    };
    let e = with(&["--e2b-api-url", "http://api.example.com"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("use https"), "{e}");
    let c = with(&[
        "--e2b-api-url",
        "http://127.0.0.1:9000",
        "--e2b-sandbox-url",
        "http://127.0.0.1:9001",
        "--e2b-run-as",
        "none",
    ])
    .unwrap()
    .e2b
    .unwrap();
    assert_eq!(c.sandbox_url.unwrap().as_str(), "http://127.0.0.1:9001");
    assert_eq!(c.run_as, None);
    let e = resolve_env(
        &[
            "--providers",
            "daytona",
            "--daytona-snapshot",
            "s",
            "--daytona-network-allow",
            "10.0.0.0/8,example.com",
        ],
        &[(DAYTONA_KEY_ENV, "k")],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("\"example.com\" is not a CIDR"), "{e}");
}
