//! `taskq models serve`: the builtin model behind an OpenAI-compatible
//! `POST /v1/embeddings`, started as a child the way the load tool starts
//! it. Without the model (`TASKQ_TEST_EMBEDDINGS_MODEL_DIR` unset) only the
//! refusal of a folder that holds none is checked (and under
//! `TASKQ_TEST_REQUIRE_ALL=1` the model's test fails).

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use taskq::process::{log_tail, ServeCommand, StartError};

use crate::common::need;

fn models_serve(model_dir: &Path, dir: &Path) -> ServeCommand {
    let args = [
        OsStr::new("models"),
        OsStr::new("serve"),
        OsStr::new("--listen"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--model-dir"),
        model_dir.as_os_str(),
    ];
    let binary = Path::new(env!("CARGO_BIN_EXE_taskq"));
    ServeCommand::subcommand(
        binary,
        args,
        dir,
        &dir.join("stderr.log"),
        Duration::from_secs(120),
    )
}

#[tokio::test]
async fn a_folder_without_the_model_stops_it_before_the_readiness_line() {
    let dir = tempfile::tempdir().unwrap();
    let refused = models_serve(&dir.path().join("no-model"), dir.path())
        .spawn()
        .await
        .err()
        .expect("models serve started without a model");
    match refused {
        StartError::StdoutClosed {
            status: Some(status),
        } => assert!(!status.success()),
        other => panic!("{other:?}"),
    }
    // The whole log: with RUST_BACKTRACE set, a backtrace follows the error.
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    assert!(log.contains("loading the model from"), "{log}");
}

#[tokio::test]
#[cfg_attr(
    not(taskq_test_env = "model"),
    ignore = "needs TASKQ_TEST_EMBEDDINGS_MODEL_DIR (all-MiniLM-L6-v2's folder)"
)]
async fn the_builtin_model_answers_like_an_openai_endpoint() {
    let model_dir = need("TASKQ_TEST_EMBEDDINGS_MODEL_DIR");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    let mut process = match models_serve(Path::new(&model_dir), dir.path())
        .spawn()
        .await
    {
        Ok(process) => process,
        Err(e) => panic!("{e}: {}", log_tail(&log, 20)),
    };
    taskq::install_crypto_provider();
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/v1/embeddings", process.url()))
        .json(&json!({ "model": "m", "input": ["deploy the fix", "a second text"] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["model"], "m", "{answer}");
    let data = answer["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[0]["embedding"].as_array().unwrap().len(), 384);

    process.terminate().unwrap();
    let status = process
        .wait_for_exit(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}
