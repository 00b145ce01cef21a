//! Secrets that never enter the computer (issue 29, docs/security.md#secrets), end to end in
//! the network lab: a contained computer sends its placeholder to an HTTPS echo host (its
//! certificate from a test CA the gateway is told to trust, `RAKAZO_EGRESS_CA_FILE`); the echo
//! host, outside the computer, records the real value arriving, and the placeholder arriving
//! untouched at a domain that is not the secret's. Then the real values are searched for, and
//! absent, in the computer's files (its home included), every process's environment and
//! readable memory inside it, its checkpoint, its activity feed, the logs and the database.
//!
//! The values have a shape no placeholder has (`rkzv-` and 32 hex digits), so the scanner run
//! inside the computer needs no copy of them: it prints the SHA-256 of every such string it
//! finds, and the test compares. A decoy of the same shape is planted in a process's
//! environment and memory, in the home, in `/tmp` and in the command feed, and each scan must
//! find it: a scan that cannot see is caught, so the absence of the real values means something.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Stdio;
use tests::netlab::Lab;
use tests::{World, WorldOptions};
use tokio::io::AsyncWriteExt;

/// The echo host: HTTPS on port 443 of the test host, appending each request's headers as one
/// JSON line to a file outside every computer, answering only `echo ok`.
const ECHO: &str = r#"
import http.server, json, ssl, sys
cert, key, log = sys.argv[1], sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(log, "a") as f:
            seen = {k.lower(): v for k, v in self.headers.items()}
            seen["path"] = self.path
            f.write(json.dumps(seen) + "\n")
        body = b"echo ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;

/// Run inside the computer, as its user: every `rkzv-<32 hex>` string in every process's
/// environment and readable memory and in the computer's writable places, as SHA-256 hex;
/// then how much it read.
const SCANNER: &str = r#"
import hashlib, os, re, sys
pat = re.compile(rb"rkzv-[0-9a-f]{32}")
found = {}
def seen(where, data):
    for m in pat.findall(data):
        found.setdefault(hashlib.sha256(m).hexdigest(), set()).add(where)
me = os.getpid()
envs = maps = nbytes = files = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        seen("environ", open(f"/proc/{pid}/environ", "rb").read())
        envs += 1
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/maps") as m, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in m:
                parts = line.split()
                if "r" not in parts[1]:
                    continue
                a, b = (int(x, 16) for x in parts[0].split("-"))
                try:
                    mem.seek(a)
                    data = mem.read(b - a)
                except (OSError, OverflowError, ValueError):
                    continue
                maps += 1
                nbytes += len(data)
                seen("memory", data)
    except OSError:
        pass
for top in [os.environ.get("HOME", "."), "/tmp", "/var/tmp", "/run", "/dev/shm"]:
    for root, _, names in os.walk(top):
        for n in names:
            try:
                with open(os.path.join(root, n), "rb") as f:
                    seen("file", f.read(64 << 20))
                files += 1
            except OSError:
                pass
for h, where in sorted(found.items()):
    print("FOUND", h, ",".join(sorted(where)))
print("SCANNED", envs, maps, nbytes, files)
"#;

fn sha(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn value() -> String {
    format!("rkzv-{}", hex::encode(rand::random::<[u8; 16]>()))
}

/// A test CA and a certificate for the echo host's names; PEM files in `dir`: the CA's
/// certificate, the host's certificate and key.
fn test_pki(dir: &Path) -> Result<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Rakazo secrets test CA");
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let names = ["api.github.com", "api.openai.com", "other.test"];
    let cert =
        CertificateParams::new(names.map(String::from).to_vec())?.signed_by(&key, &issuer)?;
    let (ca, crt, k) = (
        dir.join("ca.pem"),
        dir.join("host.pem"),
        dir.join("host.key"),
    );
    std::fs::write(&ca, issuer.pem())?;
    std::fs::write(&crt, cert.pem())?;
    std::fs::write(&k, key.serialize_pem())?;
    Ok((ca, crt, k))
}

/// `rakazo <args>` through the real binary, `stdin` piped in; its stdout.
async fn rakazo(w: &World, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let mut cmd = tokio::process::Command::new(tests::bin("rakazo"));
    cmd.env_clear()
        .env("RAKAZO_URL", &w.http)
        .env("RAKAZO_TOKEN", w.api_token())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let Some(mut pipe) = child.stdin.take() {
        if let Some(s) = stdin {
            pipe.write_all(s.as_bytes()).await?;
        }
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .context("rakazo did not finish")??;
    if !out.status.success() {
        bail!("rakazo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The echo host's requests so far, oldest first.
fn requests(log: &Path) -> Result<Vec<serde_json::Value>> {
    Ok(std::fs::read_to_string(log)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?)
}

/// The echo host's last request for `path`.
fn request(log: &Path, path: &str) -> Result<serde_json::Value> {
    requests(log)?
        .into_iter()
        .rev()
        .find(|r| r["path"] == path)
        .with_context(|| format!("no request for {path}"))
}

/// README.md's Secrets block: each `rakazo …` line's arguments, and the variable whose value
/// `printf %s "$VAR" |` feeds it.
fn readme_secret_lines() -> Result<Vec<(Option<String>, Vec<String>)>> {
    let block = tests::readme::block("## Secrets")?;
    let mut out = Vec::new();
    let mut joined = String::new();
    for raw in block.lines() {
        let (code, _) = raw.split_once(" #").unwrap_or((raw, ""));
        let code = code.trim_end();
        if let Some(head) = code.strip_suffix('\\') {
            joined.push_str(head);
            continue;
        }
        joined.push_str(code);
        let line = std::mem::take(&mut joined);
        let (var, cmd) = match line.split_once(" | ") {
            Some((feed, cmd)) => {
                let var = feed
                    .strip_prefix("printf %s \"$")
                    .and_then(|v| v.strip_suffix('"'))
                    .with_context(|| format!("README feeds a command otherwise: {feed}"))?;
                (Some(var.to_string()), cmd)
            }
            None => (None, line.as_str()),
        };
        let words = tests::readme::shell_words(cmd);
        if words.first().map(String::as_str) == Some("rakazo") {
            out.push((var, words[1..].to_vec()));
        }
    }
    Ok(out)
}

/// Every file under `dir` holding `needle`.
fn files_with(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file() {
                if let Ok(bytes) = std::fs::read(&p) {
                    if bytes.windows(needle.len()).any(|w| w == needle) {
                        hits.push(p.display().to_string());
                    }
                }
            }
        }
    }
    hits
}

async fn scenario(lab: &mut Lab, pki: &Path, echo_log: &Path) -> Result<()> {
    let ca = pki.join("ca.pem");
    let mut w = World::start_with(WorldOptions {
        env: vec![
            ("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into()),
            (
                "RAKAZO_EGRESS_HOSTS".into(),
                "api.github.com=203.0.113.10,api.openai.com=203.0.113.10,other.test=203.0.113.11"
                    .into(),
            ),
            ("RAKAZO_EGRESS_CA_FILE".into(), ca.display().to_string()),
        ],
        ..Default::default()
    })
    .await?;
    let _ = lab;
    let ws = "acme";
    let c = w.create_computer(ws).await?;
    let (github, openai, rotated, decoy) = (value(), value(), value(), value());
    for v in [&github, &openai, &rotated] {
        w.add_secret(v);
    }
    let env = [
        ("GITHUB_TOKEN", github.as_str()),
        ("OPENAI_API_KEY", openai.as_str()),
        ("NEW_TOKEN", rotated.as_str()),
    ];

    // README.md's Secrets lines, as written, through the real binary (the values on stdin);
    // the rotation and deletion come later.
    let lines = readme_secret_lines()?;
    assert!(lines.len() >= 6, "{lines:?}");
    let mut later = Vec::new();
    let mut exec_out = Vec::new();
    for (stdin_var, args) in lines {
        let args: Vec<String> = args
            .into_iter()
            .map(|a| if a == "c-..." { c.clone() } else { a })
            .collect();
        if matches!(args[1].as_str(), "rotate" | "delete") {
            later.push((stdin_var, args));
            continue;
        }
        let stdin = stdin_var.map(|v| {
            env.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| x.to_string())
        });
        let stdin = match stdin {
            Some(Some(v)) => Some(v),
            Some(None) => bail!("README's Secrets lines use an unknown variable"),
            None => None,
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = rakazo(&w, &argv, stdin.as_deref()).await?;
        for v in [&github, &openai] {
            assert!(!out.contains(v.as_str()), "rakazo {argv:?} printed a value");
        }
        if args[0] == "exec" {
            exec_out.push(out);
        }
    }
    assert_eq!(
        exec_out,
        ["echo ok\n", "echo ok\n"],
        "the README's exec lines"
    );
    let listed = rakazo(&w, &["--json", "secret", "list", "--workspace", ws], None).await?;
    let list: serde_json::Value = serde_json::from_str(&listed)?;
    let placeholder = |name: &str| -> Result<String> {
        Ok(list["secrets"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name))
            .and_then(|s| s["placeholder"].as_str())
            .context("a placeholder")?
            .to_string())
    };
    let (gh_placeholder, placeholder) = (placeholder("github")?, placeholder("openai")?);
    assert!(placeholder.starts_with("rakazo-secret-openai-"), "{listed}");

    // The computer holds the placeholder; the echo host receives the value. To a domain that
    // is no secret's (its certificate not trusted by the computer: -k), the placeholder goes
    // as it was sent, and no header is added.
    let out = w
        .sh(
            &c,
            r#"echo "env=$RAKAZO_SECRET_OPENAI"
               curl -sS -m 10 -k -H "Authorization: Bearer $RAKAZO_SECRET_OPENAI" https://other.test/elsewhere
               python3 -c 'import os, urllib.request; print(urllib.request.urlopen(urllib.request.Request("https://api.openai.com/python", headers={"X-Token": os.environ["RAKAZO_SECRET_OPENAI"]}), timeout=10).read().decode().strip())'
            "#,
        )
        .await?;
    assert_eq!(
        out,
        format!("env={placeholder}\necho ok\necho ok\n"),
        "{out}"
    );
    let seen = requests(echo_log)?;
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0]["host"], "api.github.com");
    assert_eq!(seen[0]["authorization"], format!("Bearer {github}"));
    assert_eq!(seen[1]["host"], "api.openai.com");
    assert_eq!(seen[1]["authorization"], format!("Bearer {openai}"));
    assert_eq!(seen[2]["host"], "other.test");
    assert_eq!(seen[2]["authorization"], format!("Bearer {placeholder}"));
    assert_eq!(
        seen[3]["x-token"], openai,
        "Python trusts the computer's CA too"
    );

    // The decoy: in a process's environment and memory, a home file, /tmp and the feed.
    w.sh(
        &c,
        &format!(
            "echo {decoy} > decoy.txt; echo {decoy} > /tmp/decoy; \
             (DECOY={decoy} nohup python3 -c 'import time; x = open(\"decoy.txt\").read(); time.sleep(600)' \
             >/dev/null 2>&1 &) ; sleep 1"
        ),
    )
    .await?;
    let scan = w
        .sh(&c, &format!("python3 - <<'PY'\n{SCANNER}\nPY"))
        .await?;
    eprintln!("scan: {scan}");
    let scanned = scan
        .lines()
        .find_map(|l| l.strip_prefix("SCANNED "))
        .context("the scanner's summary")?;
    let counts: Vec<u64> = scanned
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    assert!(
        counts[0] >= 2 && counts[1] >= 10 && counts[3] >= 2,
        "{scan}"
    );
    let decoy_found = format!("FOUND {} environ,file,memory", sha(&decoy));
    assert!(
        scan.lines().any(|l| l == decoy_found),
        "the scanner must see the decoy everywhere it was put: {scan}"
    );
    for (name, v) in [("github", &github), ("openai", &openai)] {
        assert!(
            !scan.contains(&sha(v)),
            "{name}'s value is inside the computer: {scan}"
        );
    }

    // Its checkpoint: every file of the stored home, read through the API.
    w.home_ok(&c, "checkpoint").await?;
    let entries = w
        .client
        .json(
            hyper::Method::GET,
            &format!("/v1/computers/{c}/home/entries"),
            None,
        )
        .await?;
    let mut stored = Vec::new();
    for e in entries["entries"].as_array().context("entries")? {
        if e["kind"] == "file" {
            let path = e["path"].as_str().context("path")?;
            let body = w
                .client
                .send(
                    hyper::Method::GET,
                    &format!(
                        "/v1/computers/{c}/home/content?path={}",
                        path.replace(' ', "%20")
                    ),
                    None,
                    None,
                    control_plane::client::full_body(bytes::Bytes::new()),
                )
                .await?;
            use http_body_util::BodyExt;
            stored.extend(body.into_body().collect().await?.to_bytes());
        }
    }
    let stored = String::from_utf8_lossy(&stored);
    assert!(
        stored.contains(&decoy),
        "the checkpoint holds the decoy file"
    );
    for v in [&github, &openai] {
        assert!(!stored.contains(v.as_str()), "a value is in the checkpoint");
    }

    // Its activity feed (which shows the commands, the decoy's among them).
    let feed = w
        .client
        .json(
            hyper::Method::GET,
            &format!("/v1/computers/{c}/activity?limit=500"),
            None,
        )
        .await?
        .to_string();
    assert!(
        feed.contains(&decoy),
        "the feed holds the commands, the decoy's among them"
    );
    for v in [&github, &openai] {
        assert!(
            !feed.contains(v.as_str()),
            "a value is in the activity feed"
        );
    }

    // Its files from outside (home, guest log, trust files), the data dir (database, its WAL,
    // the stored checkpoints, the server's log): the values nowhere, the decoy and the
    // placeholder where they belong (so these scans read what they should).
    let dir = w.local_dir_of(&c);
    assert!(!files_with(&dir, decoy.as_bytes()).is_empty());
    assert!(!files_with(&dir, placeholder.as_bytes()).is_empty());
    let data = w.data_dir.path().to_path_buf();
    assert!(
        !files_with(&data, placeholder.as_bytes()).is_empty(),
        "the database holds the placeholder"
    );
    for v in [&github, &openai] {
        let hits: Vec<String> = [&dir, &data]
            .iter()
            .flat_map(|d| files_with(d, v.as_bytes()))
            .collect();
        assert!(hits.is_empty(), "a value is stored in {hits:?}");
    }

    // The bot's Chrome trusts the computer's CA (its own NSS store): the gateway adds the header
    // to its request as to curl's.
    let bot = tests::bot::Bot::new(&w, &c, "bot-1").await?;
    bot.ensure().await?;
    let nav = bot.navigate("https://api.github.com/chrome").await?;
    let chrome = request(echo_log, "/chrome").with_context(|| format!("{nav}"))?;
    assert_eq!(
        chrome["authorization"],
        format!("Bearer {github}"),
        "{chrome}"
    );

    // README's rotation and deletion: the same placeholder carries the new value; a deleted
    // secret is substituted no more (the next connection sees it).
    for (stdin_var, args) in later {
        let stdin = stdin_var.and_then(|v| {
            env.iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| x.to_string())
        });
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        rakazo(&w, &argv, stdin.as_deref()).await?;
    }
    let listed = rakazo(&w, &["--json", "secret", "list", "--workspace", ws], None).await?;
    assert!(
        listed.contains(&gh_placeholder) && !listed.contains(&placeholder),
        "{listed}"
    );
    // A restarted control plane makes a new CA: the running computer's bundle is rewritten in
    // place (the jail's bind shows it) and its secrets come back to the new gateway.
    w.kill_server();
    w.spawn_server().await?;
    let restarted = w
        .sh(&c, "curl -sS -m 10 https://api.github.com/after-restart")
        .await?;
    assert_eq!(restarted, "echo ok\n");
    let r = request(echo_log, "/after-restart")?;
    assert_eq!(r["authorization"], format!("Bearer {rotated}"), "{r}");

    // A deleted secret's domain is passed through untouched (the real server's certificate
    // from the test CA, which the computer does not trust: -k), and its variable is gone.
    let after = w
        .sh(
            &c,
            &format!(
                r#"echo "openai=${{RAKAZO_SECRET_OPENAI:-unset}}"
                   curl -sS -m 10 https://api.github.com/after-github >/dev/null
                   curl -sS -m 10 -k -H "Authorization: Bearer {placeholder}" https://api.openai.com/after-openai >/dev/null"#
            ),
        )
        .await?;
    assert_eq!(after, "openai=unset\n");
    let gh = request(echo_log, "/after-github")?;
    assert_eq!(gh["authorization"], format!("Bearer {rotated}"), "{gh}");
    let oa = request(echo_log, "/after-openai")?;
    assert_eq!(oa["authorization"], format!("Bearer {placeholder}"), "{oa}");
    w.check_log()
}

#[test]
fn the_real_value_reaches_its_domain_and_nothing_inside_the_computer() -> Result<()> {
    let mut lab = Lab::new()?;
    let pki = tempfile::tempdir()?;
    let (_, cert, key) = test_pki(pki.path())?;
    let echo_dir = tempfile::tempdir()?;
    let script = echo_dir.path().join("echo.py");
    let echo_log = echo_dir.path().join("requests.jsonl");
    std::fs::write(&script, ECHO)?;
    std::fs::write(&echo_log, "")?;
    let argv = [
        "python3".to_string(),
        script.display().to_string(),
        cert.display().to_string(),
        key.display().to_string(),
        echo_log.display().to_string(),
    ];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    lab.serve_on_host(&argv)?;
    let pki_dir = pki.path().to_path_buf();
    lab.inside(move |lab| {
        Box::pin(async move {
            // The echo host listens before the computer calls it.
            for _ in 0..100 {
                if tokio::net::TcpStream::connect("203.0.113.10:443")
                    .await
                    .is_ok()
                {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            scenario(lab, &pki_dir, &echo_log).await
        })
    })
}

/// The API's refusals name the bad field and never echo a value; a computer that is not fully
/// contained (the World's default, `host-network`) gets no secret, not even a placeholder.
#[tokio::test]
async fn refusals_never_echo_a_value_and_uncontained_computers_get_nothing() -> Result<()> {
    let mut w = World::start().await?;
    let v = value();
    w.add_secret(&v);
    let c = w.create_computer("acme").await?;
    let put = |ws: &str, name: &str, body: serde_json::Value| {
        let path = format!("/v1/workspaces/{ws}/secrets/{name}");
        let client = &w.client;
        async move { client.json(hyper::Method::PUT, &path, Some(&body)).await }
    };
    let refusals = [
        (
            "acme",
            "Bad.Name",
            serde_json::json!({ "value": v, "domains": ["a.test"] }),
            "name",
        ),
        (
            "acme",
            "ok",
            serde_json::json!({ "value": v, "domains": [] }),
            "domains",
        ),
        (
            "acme",
            "ok",
            serde_json::json!({ "value": v, "domains": ["not a domain"] }),
            "domain",
        ),
        (
            "acme",
            "ok",
            serde_json::json!({ "value": format!("{v}\n"), "domains": ["a.test"] }),
            "value",
        ),
        (
            "acme",
            "ok",
            serde_json::json!({ "value": v, "domains": ["a.test"], "header": "X: none" }),
            "header",
        ),
        (
            "bad%20ws",
            "ok",
            serde_json::json!({ "value": v, "domains": ["a.test"] }),
            "workspace",
        ),
    ];
    for (ws, name, body, field) in refusals {
        let e = put(ws, name, body).await.unwrap_err().to_string();
        assert!(e.contains("bad_request") || e.contains("400"), "{e}");
        assert!(e.contains(field), "{field}: {e}");
        assert!(!e.contains(&v), "a refusal echoed the value: {e}");
    }
    let ok = put(
        "acme",
        "ok",
        serde_json::json!({ "value": v, "domains": ["a.test"] }),
    )
    .await?;
    assert!(!ok.to_string().contains(&v), "{ok}");
    assert_eq!(ok["env_var"], "RAKAZO_SECRET_OK");
    let env = w.sh(&c, "echo ${RAKAZO_SECRET_OK:-none}").await?;
    assert_eq!(env, "none\n", "an uncontained computer got a placeholder");
    let e = w
        .client
        .json(
            hyper::Method::DELETE,
            "/v1/workspaces/acme/secrets/missing",
            None,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("not_found") || e.contains("404"), "{e}");
    // The CLI refuses an empty standard input rather than set an empty value.
    let empty = rakazo(
        &w,
        &[
            "secret",
            "set",
            "--workspace",
            "acme",
            "x",
            "--domain",
            "a.test",
        ],
        Some(""),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(empty.contains("standard input"), "{empty}");
    w.check_log()
}
