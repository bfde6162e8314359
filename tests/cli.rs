//! The command line as a user meets it (issue 19, case 16): each command's help shows the flags
//! it uses and no other, and `check-config` prints TOML that warren reads back.

use std::process::Command;

fn warren(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warren")).args(args).output().expect("warren runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn each_commands_help_lists_only_the_flags_it_uses() {
    let (ok, help) = warren(&["demo", "--help"]);
    assert!(ok, "{help}");
    for used in ["--management-url", "--user", "--password-file", "--amqp-url", "--vhost", "--cleanup"] {
        assert!(help.contains(used), "demo uses {used}: {help}");
    }
    for ignored in ["--listen", "--database", "--retention-days", "--poll-interval-secs"] {
        assert!(!help.contains(ignored), "demo ignores {ignored}: {help}");
    }
    let (_, help) = warren(&["user", "add", "--help"]);
    assert!(help.contains("--database") && !help.contains("--listen"), "{help}");
    let (_, help) = warren(&["serve", "--help"]);
    assert!(help.contains("default 30"), "the retention default as the configuration has it: {help}");
    assert!(!help.contains("default 7)"), "{help}");
}

#[test]
fn check_config_prints_toml_that_warren_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warren.toml");
    std::fs::write(&path, "retention_days = 45\n[[brokers]]\nname = \"a\"\npassword = \"s3cret\"\n").unwrap();
    let (ok, printed) = warren(&["check-config", "--config", path.to_str().unwrap(), "--listen", "127.0.0.1:9999"]);
    assert!(ok, "{printed}");
    assert!(!printed.contains("s3cret") && !printed.contains("Url {") && !printed.contains("secs:"), "{printed}");
    assert!(printed.contains("listen = \"127.0.0.1:9999\"") && printed.contains("retention_days = 45"), "{printed}");
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &printed).unwrap();
    let (ok, reprinted) = warren(&["check-config", "--config", again.to_str().unwrap()]);
    assert!(ok, "{reprinted}");
    assert_eq!(reprinted, printed, "it reads back to the same configuration");
}
