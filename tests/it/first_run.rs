//! The README's first run pasted into a shell as a reader would: its
//! commands against a real server, nothing edited but the address and the
//! operator token the server was started with.

use std::path::Path;

use crate::common::*;

/// The first `sh` block under the README's "A first run".
fn first_run_commands() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## A first run\n")
        .nth(1)
        .expect("the README has a first run");
    let block = section
        .split("```sh\n")
        .nth(1)
        .expect("the first run has a sh block");
    block.split("\n```").next().unwrap_or_default().to_owned()
}

#[tokio::test]
#[cfg_attr(
    not(taskq_test_env = "jq"),
    ignore = "needs TASKQ_TEST_JQ (the jq the README's first run uses)"
)]
async fn the_readme_s_first_run_works_as_pasted() {
    let jq = need("TASKQ_TEST_JQ");
    let srv = TestServer::start(Backend::Sqlite).await;
    let address = srv
        .base_url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let commands = first_run_commands()
        .replace("localhost:8080", address)
        .replace("change-me", &srv.admin_token);
    // What the reader's shell would know afterwards, for the checks below.
    let script = format!("{commands}\nprintf '\\n%s %s\\n' \"$KEY\" \"$TASK\"\n");
    let bin = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(&jq, bin.path().join("jq")).expect("link jq");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("PATH", path)
        .output()
        .await
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the first run failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    let (key, task) = last.split_once(' ').expect("the key and the task id");
    let done = srv.get_task(key, task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({ "pages": 3 }), "{done}");
    // Its reviewer's task was waiting on it, and no longer is.
    let waiting = srv.list_all(key, "status=pending").await;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["title"], "review it");
}
