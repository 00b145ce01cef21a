use super::*;
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, PermissionsExt};

fn setup() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("home")).expect("mkdir home");
    let home = Home::new(dir.path().join("home")).expect("home");
    (dir, home)
}

fn code(r: Result<impl fmt::Debug, OpError>) -> (ErrorCode, String) {
    let e = r.expect_err("expected an error");
    (e.code, e.message)
}

fn write(home: &Home, path: &str, data: &[u8], executable: bool) {
    let mut w = home.create_write(path, executable).expect("create_write");
    w.file().write_all(data).expect("write");
    w.commit().expect("commit");
}

fn read(home: &Home, path: &str) -> Vec<u8> {
    let (mut f, size) = home.open_read(path, u64::MAX).expect("open_read");
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).expect("read");
    assert_eq!(buf.len() as u64, size);
    buf
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn normalize_accepts_relative_forms() {
    let n = |p| normalize(p).expect("accepted").to_string();
    assert_eq!(n("a/b"), "a/b");
    assert_eq!(n("./a//b/"), "a/b");
    assert_eq!(n("a/./b"), "a/b");
    assert_eq!(n(""), ".");
    assert_eq!(n("."), ".");
    assert_eq!(n("./"), ".");
    assert!(normalize("").expect("home").is_home());
    assert_eq!(
        normalize(".hidden/x").expect("ok").components(),
        [".hidden", "x"]
    );
}

#[test]
fn normalize_rejects_traversal() {
    assert_eq!(
        code(normalize("../x")),
        (
            ErrorCode::PathRejected,
            r#"path "../x" leaves the home"#.into()
        )
    );
    assert_eq!(
        code(normalize("a/../../x")),
        (
            ErrorCode::PathRejected,
            r#"path "a/../../x" leaves the home"#.into()
        )
    );
    assert_eq!(code(normalize("..")).0, ErrorCode::PathRejected);
    let (c, m) = code(normalize("a/../b"));
    assert_eq!(c, ErrorCode::PathRejected);
    assert!(m.contains(r#""a/../b""#), "{m}");
}

#[test]
fn normalize_rejects_absolute_nul_and_long() {
    assert_eq!(
        code(normalize("/etc")),
        (
            ErrorCode::PathRejected,
            r#"path "/etc" is absolute; paths are relative to the home"#.into()
        )
    );
    assert_eq!(code(normalize("a\0b")).0, ErrorCode::PathRejected);
    let long_component = "x".repeat(256);
    assert_eq!(code(normalize(&long_component)).0, ErrorCode::PathRejected);
    assert!(normalize(&"x".repeat(255)).is_ok());
    let long_path = vec!["abc"; 1100].join("/");
    let (c, m) = code(normalize(&long_path));
    assert_eq!(c, ErrorCode::PathRejected);
    assert!(m.len() < 400, "message not shortened: {m}");
}

#[test]
fn new_requires_an_existing_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(Home::new(dir.path().join("missing")).is_err());
    std::fs::write(dir.path().join("f"), b"x").expect("write");
    assert!(Home::new(dir.path().join("f")).is_err());
    let home = Home::new(dir.path().join(".")).expect("home");
    assert_eq!(
        home.root(),
        std::fs::canonicalize(dir.path()).expect("canon")
    );
}

#[test]
fn binary_round_trip() {
    let (_t, home) = setup();
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 256) as u8).collect();
    write(&home, "bin/blob.dat", &data, false);
    assert_eq!(read(&home, "bin/blob.dat"), data);
    assert_eq!(read(&home, "./bin//blob.dat"), data);
    // Replacing an existing file.
    write(&home, "bin/blob.dat", b"\0\xff", false);
    assert_eq!(read(&home, "bin/blob.dat"), b"\0\xff");
}

#[test]
fn write_modes_are_exact() {
    let (_t, home) = setup();
    write(&home, "run.sh", b"#!/bin/sh\n", true);
    write(&home, "notes.txt", b"hi", false);
    assert_eq!(mode(&home.root().join("run.sh")), 0o700);
    assert_eq!(mode(&home.root().join("notes.txt")), 0o600);
    // Rewriting changes the mode to what was asked.
    write(&home, "run.sh", b"data", false);
    assert_eq!(mode(&home.root().join("run.sh")), 0o600);
}

#[test]
fn write_creates_nested_directories_0700() {
    let (_t, home) = setup();
    write(&home, "a/b/c/d.txt", b"deep", false);
    assert_eq!(read(&home, "a/b/c/d.txt"), b"deep");
    for d in ["a", "a/b", "a/b/c"] {
        assert_eq!(mode(&home.root().join(d)), 0o700, "{d}");
    }
}

#[test]
fn a_write_that_keeps_existing_entries_never_replaces_one() {
    let (_t, home) = setup();
    write(&home, "up/a.txt", b"the bot's", false);
    // Refused at once when the name is taken (a file, a directory or a symlink alike).
    let taken = home.create_write("up/a.txt", false).expect("create");
    assert_eq!(code(taken.keep_existing()).0, ErrorCode::Exists);
    std::fs::create_dir(home.root().join("up/d")).expect("mkdir");
    let dir = home.create_write("up/d", false);
    assert!(dir.is_err(), "a directory is never a write target");
    // And at commit when the name appeared meanwhile: the newcomer stays, nothing is replaced.
    let mut w = home
        .create_write("up/b.txt", false)
        .expect("create")
        .keep_existing()
        .expect("free name");
    w.file().write_all(b"the upload").expect("write");
    write(&home, "up/b.txt", b"appeared meanwhile", false);
    assert_eq!(code(w.commit()).0, ErrorCode::Exists);
    assert_eq!(read(&home, "up/a.txt"), b"the bot's");
    assert_eq!(read(&home, "up/b.txt"), b"appeared meanwhile");
    // A free name is written as usual.
    let mut w = home
        .create_write("up/c.txt", false)
        .expect("create")
        .keep_existing()
        .expect("free name");
    w.file().write_all(b"new").expect("write");
    w.commit().expect("commit");
    assert_eq!(read(&home, "up/c.txt"), b"new");
    let names: Vec<_> = std::fs::read_dir(home.root().join("up"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(TEMP_PREFIX)),
        "{names:?}"
    );
}

#[test]
fn dropped_write_leaves_nothing() {
    let (_t, home) = setup();
    write(&home, "keep.txt", b"old", false);
    {
        let mut w = home.create_write("keep.txt", false).expect("create");
        w.file().write_all(b"new but abandoned").expect("write");
        let names: Vec<_> = std::fs::read_dir(home.root())
            .expect("readdir")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
            .collect();
        assert!(
            names.iter().any(|n| n.starts_with(TEMP_PREFIX)),
            "{names:?}"
        );
    }
    let names: Vec<_> = std::fs::read_dir(home.root())
        .expect("readdir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["keep.txt"]);
    assert_eq!(read(&home, "keep.txt"), b"old");
    // A new file that was never committed never appears.
    drop(home.create_write("never.txt", false).expect("create"));
    assert_eq!(code(home.open_read("never.txt", 10)).0, ErrorCode::NotFound);
}

#[test]
fn write_refuses_directories_and_the_home() {
    let (_t, home) = setup();
    std::fs::create_dir(home.root().join("d")).expect("mkdir");
    assert_eq!(code(home.create_write("d", false)).0, ErrorCode::BadRequest);
    assert_eq!(code(home.create_write("", false)).0, ErrorCode::BadRequest);
    std::fs::write(home.root().join("f"), b"x").expect("write");
    let (c, m) = code(home.create_write("f/x", false));
    assert_eq!(c, ErrorCode::BadRequest);
    assert!(m.contains("not a directory"), "{m}");
}

#[test]
fn symlink_in_the_middle_is_refused() {
    let (t, home) = setup();
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(outside.join("secret"), b"s").expect("write");
    symlink(&outside, home.root().join("link")).expect("symlink");
    let expected = (
        ErrorCode::PathRejected,
        r#"path "link/secret" goes through a symlink"#,
    );
    let (c, m) = code(home.open_read("link/secret", 100));
    assert_eq!((c, m.as_str()), expected);
    assert_eq!(
        code(home.create_write("link/new", false)).0,
        ErrorCode::PathRejected
    );
    assert_eq!(code(home.list("link")).0, ErrorCode::PathRejected);
    assert_eq!(code(home.resolve_cwd("link")).0, ErrorCode::PathRejected);
    assert!(!outside.join("new").exists());
}

#[test]
fn final_symlink_is_never_followed() {
    let (t, home) = setup();
    let secret = t.path().join("secret");
    std::fs::write(&secret, b"outside").expect("write");
    symlink(&secret, home.root().join("s")).expect("symlink");
    assert_eq!(
        code(home.open_read("s", 100)),
        (
            ErrorCode::PathRejected,
            r#"path "s" goes through a symlink"#.into()
        )
    );
    assert_eq!(
        code(home.create_write("s", false)).0,
        ErrorCode::PathRejected
    );
    // Dangling link to a file that does not exist yet: writing must not create it.
    let target = t.path().join("created-outside");
    symlink(&target, home.root().join("dangling")).expect("symlink");
    assert_eq!(
        code(home.create_write("dangling", false)).0,
        ErrorCode::PathRejected
    );
    assert!(!target.exists());
    assert_eq!(std::fs::read(&secret).expect("read"), b"outside");
}

#[test]
fn symlink_swapped_in_before_commit_is_refused() {
    let (t, home) = setup();
    let secret = t.path().join("secret");
    std::fs::write(&secret, b"outside").expect("write");
    let mut w = home.create_write("f", false).expect("create");
    w.file().write_all(b"mine").expect("write");
    symlink(&secret, home.root().join("f")).expect("symlink");
    assert_eq!(code(w.commit()).0, ErrorCode::PathRejected);
    assert_eq!(std::fs::read(&secret).expect("read"), b"outside");
    assert!(std::fs::symlink_metadata(home.root().join("f"))
        .expect("stat")
        .file_type()
        .is_symlink());
}

#[test]
fn symlink_inside_the_home_is_refused_too() {
    let (_t, home) = setup();
    write(&home, "real/file", b"x", false);
    symlink(home.root().join("real"), home.root().join("alias")).expect("symlink");
    symlink("file", home.root().join("real/alias-file")).expect("symlink");
    assert_eq!(
        code(home.open_read("alias/file", 10)).0,
        ErrorCode::PathRejected
    );
    assert_eq!(
        code(home.open_read("real/alias-file", 10)).0,
        ErrorCode::PathRejected
    );
}

#[test]
fn list_is_sorted_and_skips_symlinks_and_specials() {
    let (t, home) = setup();
    let root = home.root();
    write(&home, "b.txt", b"12345", false);
    write(&home, "a.sh", b"#!", true);
    std::fs::create_dir(root.join("c")).expect("mkdir");
    write(&home, "c/inner", b"1", false);
    symlink(t.path(), root.join("link-dir")).expect("symlink");
    symlink(root.join("b.txt"), root.join("link-file")).expect("symlink");
    let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).expect("bind");
    let list = home.list("").expect("list");
    let want = vec![
        FileEntry {
            path: "a.sh".into(),
            kind: FileKind::File,
            size: 2,
            executable: true,
        },
        FileEntry {
            path: "b.txt".into(),
            kind: FileKind::File,
            size: 5,
            executable: false,
        },
        FileEntry {
            path: "c".into(),
            kind: FileKind::Dir,
            size: 0,
            executable: false,
        },
    ];
    assert_eq!(list, want);
    let inner = home.list("./c/").expect("list");
    assert_eq!(
        inner,
        [FileEntry {
            path: "c/inner".into(),
            kind: FileKind::File,
            size: 1,
            executable: false
        }]
    );
}

#[test]
fn list_errors() {
    let (_t, home) = setup();
    write(&home, "f", b"x", false);
    assert_eq!(code(home.list("f")).0, ErrorCode::BadRequest);
    assert_eq!(
        code(home.list("missing")),
        (
            ErrorCode::NotFound,
            r#"path "missing" does not exist"#.into()
        )
    );
    assert_eq!(code(home.list("../")).0, ErrorCode::PathRejected);
}

#[test]
fn list_caps_entries() {
    let (_t, home) = setup();
    let dir = home.root().join("many");
    std::fs::create_dir(&dir).expect("mkdir");
    for i in 0..=MAX_LIST_ENTRIES {
        File::create(dir.join(format!("f{i}"))).expect("create");
    }
    let (c, m) = code(home.list("many"));
    assert_eq!(c, ErrorCode::TooLarge);
    assert!(m.contains("10000"), "{m}");
    std::fs::remove_file(dir.join("f0")).expect("rm");
    assert_eq!(home.list("many").expect("list").len(), MAX_LIST_ENTRIES);
}

#[test]
fn read_cap_and_errors() {
    let (_t, home) = setup();
    write(&home, "ten", b"0123456789", false);
    assert_eq!(home.open_read("ten", 10).expect("fits").1, 10);
    assert_eq!(
        code(home.open_read("ten", 9)),
        (ErrorCode::TooLarge, "computer file exceeds 9 bytes".into())
    );
    assert_eq!(code(home.open_read("missing", 9)).0, ErrorCode::NotFound);
    assert_eq!(code(home.open_read("missing/x", 9)).0, ErrorCode::NotFound);
    assert_eq!(code(home.open_read("", 9)).0, ErrorCode::BadRequest);
    std::fs::create_dir(home.root().join("d")).expect("mkdir");
    assert_eq!(code(home.open_read("d", 9)).0, ErrorCode::BadRequest);
    nix::unistd::mkfifo(&home.root().join("fifo"), Mode::from_bits_truncate(0o600))
        .expect("mkfifo");
    // Must not block waiting for a writer.
    assert_eq!(code(home.open_read("fifo", 9)).0, ErrorCode::BadRequest);
}

#[test]
fn resolve_cwd_checks_existence_and_kind() {
    let (_t, home) = setup();
    std::fs::create_dir_all(home.root().join("w/x")).expect("mkdir");
    assert_eq!(
        home.resolve_cwd("w/x").expect("cwd"),
        home.root().join("w/x")
    );
    assert_eq!(home.resolve_cwd("").expect("cwd"), home.root());
    assert_eq!(code(home.resolve_cwd("nope")).0, ErrorCode::NotFound);
    write(&home, "w/file", b"", false);
    assert_eq!(code(home.resolve_cwd("w/file")).0, ErrorCode::BadRequest);
    assert_eq!(code(home.resolve_cwd("../w")).0, ErrorCode::PathRejected);
}
