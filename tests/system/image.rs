//! The computer image (issue 10), inspected as built by the real `rakazo image build`: the guest
//! is static, the agents' tools run as the workspace user, the home belongs to it, and the
//! guest is the entry process under an init.

use anyhow::{Context, Result};
use tests::engine;

/// Runs `script` in a throw-away container of the image as `user`; returns stdout.
fn run_in_image(image: &str, user: &str, script: &str) -> Result<String> {
    engine::podman(&[
        "run",
        "--rm",
        "--init",
        "--network",
        "none",
        "--user",
        user,
        "--entrypoint",
        "sh",
        image,
        "-c",
        script,
    ])
}

#[test]
fn the_image_holds_a_static_guest_and_the_agents_tools() -> Result<()> {
    let image = engine::image()?;
    // The guest: statically linked (ldd says so for a static-pie or static executable), root's,
    // and the image's entry command.
    let ldd = run_in_image(
        &image,
        "root",
        "ldd /usr/local/bin/rakazo-guest 2>&1; stat -c '%U %a' /usr/local/bin/rakazo-guest",
    )?;
    assert!(
        ldd.contains("not a dynamic executable") || ldd.contains("statically linked"),
        "the guest is not static: {ldd}"
    );
    assert!(ldd.contains("root 755"), "{ldd}");
    let cmd = engine::podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.Cmd}} {{.Config.User}}",
        &image,
    ])?;
    assert!(cmd.contains("/usr/local/bin/rakazo-guest"), "{cmd}");

    // The tools, as the workspace user.
    let out = run_in_image(
        &image,
        "rakazo",
        "set -e; id -un; stat -c '%U %a' /home/rakazo; stat -c '%U %a' /etc/rakazo; \
         stat -c '%a' /tmp/.X11-unix; \
         pdftotext -v 2>&1 | head -1; pandoc --version | head -1; \
         python3 -c 'import openpyxl; print(\"openpyxl\", openpyxl.__version__)'; \
         git --version; gh --version | head -1; uv --version; chromium --version; \
         for t in Xvnc vncconfig xauth dbus-daemon setpriv; do command -v $t; done; \
         command -v Xvfb x11vnc || echo 'no Xvfb, no x11vnc'",
    )
    .context("the tools run")?;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"rakazo"), "{out}");
    assert!(
        out.contains("rakazo 700"),
        "the home is the workspace user's, 0700: {out}"
    );
    assert!(
        out.contains("root 700"),
        "/etc/rakazo (the token's directory) is root's: {out}"
    );
    assert!(out.contains("\n1777\n"), "/tmp/.X11-unix: {out}");
    for tool in [
        "pdftotext version",
        "pandoc",
        "openpyxl",
        "git version",
        "gh version",
        "uv ",
        "Chromium",
        "/usr/bin/Xvnc",
        "/usr/bin/vncconfig",
        "/usr/bin/xauth",
        "/usr/bin/dbus-daemon",
        "/usr/bin/setpriv",
    ] {
        assert!(
            out.contains(tool),
            "{tool} is missing from the image:\n{out}"
        );
    }
    // Desktops run Xvnc; the server it replaced and the per-view VNC server are gone.
    assert!(out.contains("no Xvfb, no x11vnc"), "{out}");
    // The workspace user cannot read the token's directory.
    let denied = run_in_image(&image, "rakazo", "ls /etc/rakazo 2>&1 || echo DENIED")?;
    assert!(denied.contains("DENIED"), "{denied}");
    Ok(())
}
