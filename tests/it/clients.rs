//! The client libraries (`clients/python`, `clients/typescript`) against
//! the real server: each library's own test suite (pytest, `node --test`:
//! every operation's round trip, a lost lease cancelling its handler, a
//! create sent again after a dropped connection, a wait released by a
//! completion, the event stream resumed across cut connections without a
//! gap or a repeat), and worker processes of
//! both run here while the test kills, stops and limits them (CONTRACT
//! §12): every task completed exactly once by 16 workers, a worker killed
//! with `kill -9` losing its task to another within the lease, SIGTERM
//! finishing or releasing what runs, a rate-limited org and a cluster whose
//! owner dies answering 429 and 503 while the workers finish everything, a
//! fleet on the dev tier's write limit slowing down, saying so and failing
//! nothing.
//! And each library installed from its folder as the guide says, into an
//! app of a user's outside the repository, whose worker script imports it
//! by its package name and completes a task.
//!
//! Runs when `TASKQ_TEST_CLIENTS_PYTHON` names a Python with
//! `clients/python/requirements-test.txt` installed and
//! `TASKQ_TEST_CLIENTS_NODE` names node, with npm beside it and `npm ci`
//! and `npm run build:test` done in `clients/typescript` (`.ci/run` does
//! all of it; the installs reach PyPI and the npm registry for what their
//! caches lack); skipped with a note otherwise. The tests take turns (one
//! lock): their timings are the contract's and the machine is small.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use reqwest::Method;
use tokio::io::{AsyncBufReadExt, BufReader};

const PYTHON_ENV: &str = "TASKQ_TEST_CLIENTS_PYTHON";
const NODE_ENV: &str = "TASKQ_TEST_CLIENTS_NODE";

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How a worker's `error` event reporting a per-minute limit begins.
const LIMIT_REPORT: &str = "rate limited: ";

#[derive(Clone)]
struct Runtimes {
    python: String,
    node: String,
}

fn runtimes() -> Runtimes {
    Runtimes {
        python: need(PYTHON_ENV),
        node: need(NODE_ENV),
    }
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lang {
    Python,
    TypeScript,
}

const BOTH: [Lang; 2] = [Lang::Python, Lang::TypeScript];

/// One worker event a worker program printed.
#[derive(Clone, Debug, serde::Deserialize)]
struct Event {
    kind: String,
    task_id: Option<String>,
    error: Option<String>,
}

/// A worker program (`clients/*/…/worker_program`) running as a process of
/// its own, its events collected as it prints them.
struct WorkerProcess {
    lang: Lang,
    child: tokio::process::Child,
    events: Arc<Mutex<Vec<(Instant, Event)>>>,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

struct WorkerSpec<'a> {
    url: &'a str,
    key: &'a str,
    concurrency: usize,
    lease_seconds: u64,
    grace_seconds: f64,
    name: String,
}

impl<'a> WorkerSpec<'a> {
    fn new(url: &'a str, key: &'a str) -> Self {
        WorkerSpec {
            url,
            key,
            concurrency: 8,
            lease_seconds: 60,
            grace_seconds: 5.0,
            name: unique("worker"),
        }
    }
}

impl WorkerProcess {
    async fn start(runtimes: &Runtimes, lang: Lang, spec: &WorkerSpec<'_>) -> WorkerProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        let stderr = dir.path().join("stderr.log");
        let mut command = match lang {
            Lang::Python => {
                let mut c = tokio::process::Command::new(&runtimes.python);
                c.arg(clients_dir().join("python/tests/worker_program.py"));
                c
            }
            Lang::TypeScript => {
                let mut c = tokio::process::Command::new(&runtimes.node);
                c.arg(clients_dir().join("typescript/dist-test/programs/worker_program.js"));
                c
            }
        };
        command
            .env("TASKQ_URL", spec.url)
            .env("TASKQ_API_KEY", spec.key)
            .env("WORKER_NAME", &spec.name)
            .env("WORKER_CONCURRENCY", spec.concurrency.to_string())
            .env("WORKER_LEASE_SECONDS", spec.lease_seconds.to_string())
            .env("WORKER_GRACE_SECONDS", spec.grace_seconds.to_string())
            .env("WORKER_WAIT_SECONDS", "5")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr log"))
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting a {lang:?} worker: {e}"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout");
        let sink = events.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let event: Event = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("a worker printed {line:?}: {e}"));
                sink.lock().unwrap().push((Instant::now(), event));
            }
        });
        let worker = WorkerProcess {
            lang,
            child,
            events,
            stderr,
            _dir: dir,
        };
        worker
            .wait_for("ready", None, Duration::from_secs(30))
            .await;
        worker
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The ids of the tasks the worker reported `kind` for, in order.
    fn ids(&self, kind: &str) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| e.kind == kind)
            .filter_map(|(_, e)| e.task_id.clone())
            .collect()
    }

    /// The errors the worker reported (its `error` events), with their
    /// task; an episode of a per-minute limit is a report, not an error.
    fn errors(&self) -> Vec<String> {
        self.error_events()
            .into_iter()
            .filter(|e| !e.contains(LIMIT_REPORT))
            .collect()
    }

    /// The worker's reports of the org's per-minute limits (`error` events).
    fn limit_reports(&self) -> Vec<String> {
        self.error_events()
            .into_iter()
            .filter(|e| e.contains(LIMIT_REPORT))
            .collect()
    }

    fn error_events(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| e.kind == "error")
            .map(|(_, e)| format!("{:?}: {:?}", e.task_id, e.error))
            .collect()
    }

    /// Waits until the worker reports `kind` (for `task`, when given);
    /// answers when it did.
    async fn wait_for(&self, kind: &str, task: Option<&str>, timeout: Duration) -> Instant {
        let what = format!("a {:?} worker reports {kind} {task:?}", self.lang);
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.events.lock().unwrap().iter().find_map(|(at, e)| {
                (e.kind == kind && (task.is_none() || e.task_id.as_deref() == task)).then_some(*at)
            });
            if let Some(at) = seen {
                return at;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting until {what}. stderr:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("worker is running");
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.expect("wait for the worker"),
            Err(_) => panic!(
                "a {:?} worker did not exit within {timeout:?}. stderr:\n{}",
                self.lang,
                self.log()
            ),
        }
    }

    /// SIGTERM, and the exit status once it stopped.
    async fn stop(&mut self) -> ExitStatus {
        self.signal("-TERM");
        self.wait_exit(Duration::from_secs(30)).await
    }

    /// Stops the worker and checks that it surfaced no error.
    async fn stop_cleanly(&mut self) {
        let status = self.stop().await;
        assert!(
            status.success(),
            "a {:?} worker exited with {status}. stderr:\n{}",
            self.lang,
            self.log()
        );
        assert!(
            self.errors().is_empty(),
            "a {:?} worker surfaced errors: {:?}\nstderr:\n{}",
            self.lang,
            self.errors(),
            self.log()
        );
    }
}

/// Creates `n` tasks in batches of 25; answers their ids.
async fn create_many(srv: &TestServer, key: &str, n: usize, item: Value) -> Vec<String> {
    let mut out = Vec::new();
    for start in (0..n).step_by(25) {
        let items: Vec<Value> = (start..n.min(start + 25))
            .map(|i| {
                let mut item = item.clone();
                item["title"] = json!(format!("task {i}"));
                item
            })
            .collect();
        out.extend(ids(&srv.create_tasks(key, Value::Array(items)).await));
    }
    out
}

/// Tasks of the org in each status.
async fn statuses(srv: &TestServer, key: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for task in srv.list_all(key, "").await {
        *out.entry(str_field(&task, "status")).or_default() += 1;
    }
    out
}

/// Waits until the org has `n` completed tasks.
async fn all_completed(srv: &TestServer, key: &str, n: usize, timeout: Duration) {
    eventually(timeout, "every task is completed", || async {
        let done = srv.list_all(key, "status=completed").await.len();
        (done == n).then_some(())
    })
    .await;
}

/// Checks that each task was reported completed once, across the workers.
fn completed_once(workers: &[WorkerProcess], expected: &[String]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for worker in workers {
        for id in worker.ids("completed") {
            *seen.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "tasks completed more than once: {twice:?}"
    );
    let expected: HashSet<&String> = expected.iter().collect();
    let reported: HashSet<&String> = seen.keys().collect();
    assert_eq!(
        reported.len(),
        expected.len(),
        "{} tasks reported completed, {} created",
        reported.len(),
        expected.len()
    );
    assert_eq!(reported, expected);
}

// ------------------------------------------------------- the libraries' suites

async fn run_suite(runtimes: &Runtimes, lang: Lang, srv: &TestServer) {
    let clients = clients_dir();
    let mut command = match lang {
        Lang::Python => {
            let mut c = tokio::process::Command::new(&runtimes.python);
            c.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
                .current_dir(clients.join("python"));
            c
        }
        Lang::TypeScript => {
            let dir = clients.join("typescript/dist-test/test");
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e} (npm run build:test)", dir.display()))
                .map(|entry| entry.expect("a directory entry").path())
                .filter(|p| p.to_string_lossy().ends_with(".test.js"))
                .collect();
            files.sort();
            assert!(!files.is_empty(), "no tests in {}", dir.display());
            let mut c = tokio::process::Command::new(&runtimes.node);
            c.args(["--test", "--test-reporter=spec"])
                .args(files)
                .current_dir(clients.join("typescript"));
            c
        }
    };
    let output = command
        .env("TASKQ_URL", &srv.base_url)
        .env("TASKQ_ADMIN_TOKEN", &srv.admin_token)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("running the {lang:?} suite: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{lang:?} suite:\n{stdout}\n{stderr}");
    assert!(
        output.status.success(),
        "the {lang:?} suite failed ({}):\n{stdout}\n{stderr}\nserver:\n{}",
        output.status,
        srv.server_log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "clients_python", taskq_test_env = "clients_node")),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON and TASKQ_TEST_CLIENTS_NODE (the client libraries' runtimes)"
)]
async fn each_librarys_suite_passes_against_the_server() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let srv = TestServer::builder(Backend::Sqlite)
        .env("TASKQ_WEBHOOKS_ALLOW_PRIVATE", "1")
        .start()
        .await;
    for lang in BOTH {
        run_suite(&runtimes, lang, &srv).await;
    }
}

// ------------------------------------------------------ installed as a user would

/// A worker script as a user writes one: the library imported by its
/// package name, each task greeted, the worker stopped once it completed one.
const PYTHON_APP: &str = r#"import os

import taskq

client = taskq.Client(os.environ["TASKQ_URL"], os.environ["TASKQ_API_KEY"])


def greet(task):
    return {"greeting": "hello, " + task["title"]}


def stop_after_one(event):
    if event.kind == "completed":
        worker.stop()


worker = taskq.Worker(client, greet, on_event=stop_after_one)
worker.run()
"#;

/// The same in TypeScript's package, as an ES module.
const TYPESCRIPT_APP: &str = r#"import { Client, Worker } from "@taskq/client";

const client = new Client({ baseUrl: process.env.TASKQ_URL, apiKey: process.env.TASKQ_API_KEY });
const worker = new Worker({
  client,
  handler: async (task) => ({ greeting: `hello, ${task.title}` }),
  onEvent: (event) => {
    if (event.kind === "completed") worker.stop();
  },
});
await worker.run();
"#;

/// What the TypeScript client's build leaves in its folder (ignored by
/// git): a fresh checkout has none of it.
const TYPESCRIPT_BUILT: [&str; 3] = ["node_modules", "dist", "dist-test"];

/// How long an install may take (it may download what no cache holds), and
/// a worker script to complete its one task.
const INSTALL_LIMIT: Duration = Duration::from_secs(180);
const WORK_LIMIT: Duration = Duration::from_secs(60);

/// A user's app in a temporary folder of its own, outside the repository,
/// with one library installed in it.
struct UserApp {
    dir: tempfile::TempDir,
    /// The interpreter that runs the app's script: the venv's Python, node.
    interpreter: PathBuf,
    script: PathBuf,
}

impl UserApp {
    /// A fresh venv made by the given Python, `pip install clients/python`
    /// into it, and the script beside it.
    async fn python(runtimes: &Runtimes) -> UserApp {
        let dir = tempfile::tempdir().expect("tempdir");
        let venv = dir.path().join("venv");
        let mut make_venv = tokio::process::Command::new(&runtimes.python);
        make_venv.args(["-m", "venv"]).arg(&venv);
        finish(make_venv, "python -m venv", INSTALL_LIMIT).await;
        let mut install = tokio::process::Command::new(venv.join("bin/pip"));
        install
            .args(["install", "--disable-pip-version-check", "--no-input"])
            .arg(clients_dir().join("python"));
        finish(install, "pip install clients/python", INSTALL_LIMIT).await;
        let script = dir.path().join("worker.py");
        std::fs::write(&script, PYTHON_APP).expect("write worker.py");
        UserApp {
            interpreter: venv.join("bin/python"),
            script,
            dir,
        }
    }

    /// `npm install <clients/typescript>` into an app of its own, with the
    /// given node's npm, from the folder as a fresh checkout has it (a copy
    /// without what earlier builds left there: the install must build it).
    async fn typescript(runtimes: &Runtimes) -> UserApp {
        let dir = tempfile::tempdir().expect("tempdir");
        let checkout = dir.path().join("taskq/clients/typescript");
        copy_tree(
            &clients_dir().join("typescript"),
            &checkout,
            &TYPESCRIPT_BUILT,
        );
        let app = dir.path().join("app");
        std::fs::create_dir(&app).expect("the app's folder");
        let manifest = json!({ "name": "greeter", "version": "1.0.0", "private": true });
        std::fs::write(app.join("package.json"), manifest.to_string()).expect("package.json");
        let node = PathBuf::from(&runtimes.node);
        let bin = node.parent().expect("node's folder");
        // npm beside the given node, and that node for npm and its scripts.
        let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .expect("PATH");
        let mut install = tokio::process::Command::new(bin.join("npm"));
        install
            .args(["install", "--no-audit", "--no-fund", "--no-update-notifier"])
            .arg(&checkout)
            .current_dir(&app)
            .env("PATH", path);
        finish(install, "npm install clients/typescript", INSTALL_LIMIT).await;
        let installed = app.join("node_modules/@taskq/client");
        for entry in declared_entry_points(&installed) {
            assert!(
                installed.join(&entry).is_file(),
                "@taskq/client declares {entry}, which its install did not make"
            );
        }
        let script = app.join("worker.mjs");
        std::fs::write(&script, TYPESCRIPT_APP).expect("write worker.mjs");
        UserApp {
            interpreter: node,
            script,
            dir,
        }
    }

    /// Runs the app's worker script against `url` with `key` until it exits.
    async fn work(&self, url: &str, key: &str) {
        let mut command = tokio::process::Command::new(&self.interpreter);
        command
            .arg(&self.script)
            .current_dir(self.dir.path())
            .env("TASKQ_URL", url)
            .env("TASKQ_API_KEY", key);
        finish(command, &self.script.display().to_string(), WORK_LIMIT).await;
    }
}

/// Runs `command` to its end (within `limit`) and checks that it
/// succeeded, showing its output otherwise.
async fn finish(mut command: tokio::process::Command, what: &str, limit: Duration) {
    command.stdin(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} ran for over {limit:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Copies the folder `from` to `to`, but for the entries of its top level
/// named in `skip`.
fn copy_tree(from: &Path, to: &Path, skip: &[&str]) {
    std::fs::create_dir_all(to).expect("create a folder");
    for entry in std::fs::read_dir(from).expect("read a folder") {
        let entry = entry.expect("a directory entry");
        if skip.iter().any(|s| entry.file_name() == *s) {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_tree(&entry.path(), &target, &[]);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// The files an installed package's `package.json` names for importers:
/// `main`, `types` and every target of `exports`.
fn declared_entry_points(package: &Path) -> Vec<String> {
    fn targets(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(path) => out.push(path.clone()),
            Value::Object(map) => map.values().for_each(|v| targets(v, out)),
            Value::Array(items) => items.iter().for_each(|v| targets(v, out)),
            _ => {}
        }
    }
    let manifest = std::fs::read_to_string(package.join("package.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", package.display()));
    let manifest: Value = serde_json::from_str(&manifest).expect("package.json is JSON");
    let mut out = Vec::new();
    for field in ["main", "types", "exports"] {
        targets(&manifest[field], &mut out);
    }
    assert!(!out.is_empty(), "@taskq/client declares no entry point");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "clients_python", taskq_test_env = "clients_node")),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON and TASKQ_TEST_CLIENTS_NODE (the client libraries' runtimes)"
)]
async fn each_library_installed_from_its_folder_into_a_fresh_app_completes_a_task() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let (python, typescript, srv) = tokio::join!(
        UserApp::python(&runtimes),
        UserApp::typescript(&runtimes),
        TestServer::start(Backend::Sqlite)
    );
    for (lang, app) in [(Lang::Python, python), (Lang::TypeScript, typescript)] {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let title = unique("greet");
        let task = srv.create_task(key, json!({ "title": title })).await;
        app.work(&srv.base_url, key).await;
        let done = srv.get_task(key, &task).await;
        assert_eq!(done["status"], "completed", "{lang:?}: {done}");
        assert_eq!(
            done["output"],
            json!({ "greeting": format!("hello, {title}") }),
            "{lang:?}: {done}"
        );
    }
}

// ------------------------------------------------------------ worker processes

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "clients_python", taskq_test_env = "clients_node")),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON and TASKQ_TEST_CLIENTS_NODE (the client libraries' runtimes)"
)]
async fn sixteen_workers_complete_each_of_2000_tasks_exactly_once() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("dev").await;
    // Every worker is polling before the first task exists, so both
    // libraries take part, whichever starts faster.
    let mut workers = Vec::new();
    for lang in BOTH {
        for _ in 0..8 {
            let spec = WorkerSpec::new(&srv.base_url, &org.owner_key);
            workers.push(WorkerProcess::start(&runtimes, lang, &spec).await);
        }
    }
    let created = create_many(&srv, &org.owner_key, 2000, json!({})).await;
    all_completed(&srv, &org.owner_key, 2000, Duration::from_secs(120)).await;
    for worker in &mut workers {
        worker.stop_cleanly().await;
    }
    completed_once(&workers, &created);
    for lang in BOTH {
        let by_lang: usize = workers
            .iter()
            .filter(|w| w.lang == lang)
            .map(|w| w.ids("completed").len())
            .sum();
        assert!(by_lang > 0, "the {lang:?} workers completed nothing");
    }
    let counts = statuses(&srv, &org.owner_key).await;
    assert_eq!(counts, HashMap::from([("completed".to_string(), 2000)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "clients_python", taskq_test_env = "clients_node")),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON and TASKQ_TEST_CLIENTS_NODE (the client libraries' runtimes)"
)]
async fn a_worker_killed_mid_task_loses_it_to_another_within_the_lease() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let srv = TestServer::start(Backend::Sqlite).await;
    for lang in BOTH {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let task = srv
            .create_task(
                key,
                json!({ "title": "long", "metadata": { "sleep_ms": 600_000 } }),
            )
            .await;
        let mut spec = WorkerSpec::new(&srv.base_url, key);
        spec.lease_seconds = 3;
        let mut victim = WorkerProcess::start(&runtimes, lang, &spec).await;
        victim
            .wait_for("claimed", Some(&task), Duration::from_secs(10))
            .await;
        // A renewal has happened, so the lease runs from a renewal, not the claim.
        victim
            .wait_for("renewed", Some(&task), Duration::from_secs(5))
            .await;
        srv.update_ok(
            key,
            json!({ "task_id": task, "metadata": { "sleep_ms": 0 } }),
        )
        .await;
        let spec = WorkerSpec::new(&srv.base_url, key);
        let mut heir = WorkerProcess::start(&runtimes, lang, &spec).await;
        victim.signal("-KILL");
        let killed = Instant::now();
        victim.wait_exit(Duration::from_secs(10)).await;
        let claimed = heir
            .wait_for("claimed", Some(&task), Duration::from_secs(10))
            .await;
        assert!(
            claimed - killed <= Duration::from_secs(4),
            "{lang:?}: the task was claimed again {:?} after the kill (lease 3 s)",
            claimed - killed
        );
        heir.wait_for("completed", Some(&task), Duration::from_secs(10))
            .await;
        heir.stop_cleanly().await;
        let history = history(&srv.get_task(key, &task).await);
        let completions = history
            .iter()
            .filter(|e| e["to_status"] == "completed")
            .count();
        assert_eq!(completions, 1, "{lang:?}: {history:?}");
        assert_eq!(srv.status_of(key, &task).await, "completed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "clients_python", taskq_test_env = "clients_node")),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON and TASKQ_TEST_CLIENTS_NODE (the client libraries' runtimes)"
)]
async fn sigterm_lets_handlers_finish_in_the_grace_period_and_releases_the_rest() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let srv = TestServer::start(Backend::Sqlite).await;
    for lang in BOTH {
        let org = srv.create_org("dev").await;
        let key = &org.owner_key;
        let quick = srv
            .create_task(
                key,
                json!({ "title": "quick", "metadata": { "sleep_ms": 1_000 } }),
            )
            .await;
        let slow = srv
            .create_task(
                key,
                json!({ "title": "slow", "metadata": { "sleep_ms": 600_000 } }),
            )
            .await;
        let mut spec = WorkerSpec::new(&srv.base_url, key);
        spec.concurrency = 2;
        spec.grace_seconds = 2.0;
        let mut worker = WorkerProcess::start(&runtimes, lang, &spec).await;
        for task in [&quick, &slow] {
            worker
                .wait_for("claimed", Some(task), Duration::from_secs(10))
                .await;
        }
        worker.signal("-TERM");
        let termed = Instant::now();
        let released = eventually(
            Duration::from_secs(10),
            "the slow task is released",
            || async { (srv.status_of(key, &slow).await == "pending").then(Instant::now) },
        )
        .await;
        assert!(
            released - termed <= Duration::from_secs(3),
            "{lang:?}: released {:?} after SIGTERM (grace 2 s)",
            released - termed
        );
        let status = worker.wait_exit(Duration::from_secs(10)).await;
        assert!(
            status.success(),
            "{lang:?}: exit {status}\n{}",
            worker.log()
        );
        assert!(
            worker.errors().is_empty(),
            "{lang:?}: {:?}",
            worker.errors()
        );
        assert_eq!(srv.status_of(key, &quick).await, "completed", "{lang:?}");
        let history = history(&srv.get_task(key, &slow).await);
        let last = history.last().expect("history");
        assert_eq!(last["to_status"], "pending", "{history:?}");
        assert_eq!(last["note"], "released by worker", "{history:?}");
        assert_eq!(worker.ids("released"), vec![slow.clone()]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "clients_python", taskq_test_env = "clients_node")),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON and TASKQ_TEST_CLIENTS_NODE (the client libraries' runtimes)"
)]
async fn workers_of_a_rate_limited_org_wait_out_the_429s_and_finish() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("dev").await;
    let key = &org.owner_key;
    let created = create_many(&srv, key, 12, json!({})).await;
    srv.set_limits(&org, json!({ "writes_per_minute": 60 }))
        .await;
    // Spend the burst, so that the workers' writes meet the limit.
    let mut refused = 0;
    for _ in 0..200 {
        let (status, _) = srv.post(key, "/keys", json!({ "name": unique("k") })).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
            break;
        }
    }
    assert_eq!(refused, 1, "the write bucket never ran out");
    let refusals_before = org_refusals(&srv, &org).await;
    let mut workers = Vec::new();
    for lang in BOTH {
        let mut spec = WorkerSpec::new(&srv.base_url, key);
        spec.concurrency = 1;
        workers.push(WorkerProcess::start(&runtimes, lang, &spec).await);
    }
    all_completed(&srv, key, created.len(), Duration::from_secs(90)).await;
    for worker in &mut workers {
        worker.stop_cleanly().await;
    }
    completed_once(&workers, &created);
    let refused_workers = org_refusals(&srv, &org).await - refusals_before;
    assert!(refused_workers > 0, "the workers met no 429");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(taskq_test_env = "clients_python", taskq_test_env = "clients_node")),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON and TASKQ_TEST_CLIENTS_NODE (the client libraries' runtimes)"
)]
async fn a_fleet_under_the_dev_tier_s_write_limit_slows_down_says_so_and_fails_nothing() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let srv = TestServer::start(Backend::Sqlite).await;
    // The org as the README makes it: the dev tier's 30 writes a minute.
    let org = crate::common::limits::create_limited_org(&srv, "dev").await;
    let key = &org.owner_key;
    let mut created = create_many(&srv, key, 54, json!({ "metadata": { "sleep_ms": 1000 } })).await;
    let retried = json!({
        "metadata": { "sleep_ms": 1000, "fail_once": true },
        "retry": { "max_retries": 1, "backoff_seconds": 1 },
    });
    created.extend(create_many(&srv, key, 6, retried).await);
    let mut workers = Vec::new();
    for lang in BOTH {
        for _ in 0..3 {
            let mut spec = WorkerSpec::new(&srv.base_url, key);
            spec.concurrency = 4;
            spec.lease_seconds = 30;
            workers.push(WorkerProcess::start(&runtimes, lang, &spec).await);
        }
    }
    // Looked at every two seconds: the org's reads are limited too.
    let deadline = Instant::now() + Duration::from_secs(300);
    while srv.list_all(key, "status=completed").await.len() < created.len() {
        assert!(
            Instant::now() < deadline,
            "the fleet did not finish in 300 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for worker in &mut workers {
        worker.stop_cleanly().await;
    }
    completed_once(&workers, &created);
    let counts = statuses(&srv, key).await;
    assert_eq!(counts, HashMap::from([("completed".to_string(), 60)]));
    // The workers said why they slowed down, once an episode, and every
    // line of theirs about a task names it.
    let said = "rate limited: write, 30/min on the dev tier; claims paused for";
    let logs: Vec<String> = workers.iter().map(WorkerProcess::log).collect();
    assert!(
        logs.iter().any(|log| log.contains(said)),
        "no worker logged the limit:\n{}",
        logs.join("\n---\n")
    );
    for lang in BOTH {
        let reports: Vec<String> = workers
            .iter()
            .filter(|w| w.lang == lang)
            .flat_map(WorkerProcess::limit_reports)
            .collect();
        assert!(
            reports.iter().any(|r| r.contains(said)),
            "no {lang:?} worker reported the limit as an error event: {reports:?}"
        );
    }
    for log in &logs {
        for line in log.lines().filter(|l| l.contains("lease lost")) {
            assert!(
                created
                    .iter()
                    .any(|id| line.contains(&format!("task {id}"))),
                "a line about a task that names none: {line}"
            );
        }
    }
}

/// Requests of the org refused by a limit, from the operator's figures.
async fn org_refusals(srv: &TestServer, org: &Org) -> u64 {
    let (status, stats) = srv.admin(Method::GET, "/admin/stats", None).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    let org_stats = stats["orgs"]
        .as_array()
        .and_then(|orgs| orgs.iter().find(|o| o["org_id"] == org.org_id.as_str()))
        .unwrap_or_else(|| panic!("the org is not in the stats: {stats}"));
    org_stats["refusals"]
        .as_u64()
        .unwrap_or_else(|| panic!("no `refusals` count: {org_stats}"))
}

// ------------------------------------------------------------------- a cluster

/// Whether `node` serves the org itself: its log says it spawned the org's
/// actor and has not stopped it since (as tests/cluster.rs finds owners).
fn owns(node: &TestServer, org: &Org) -> bool {
    let log = node.server_log();
    let count = |needles: &[&str]| {
        log.lines()
            .filter(|l| l.contains(&org.org_id) && needles.iter().any(|n| l.contains(n)))
            .count()
    };
    count(&["org actor spawned"]) > count(&["org actor stopped", "org lost to another node"])
}

/// The number of completed tasks, or `None` while the org moves (503).
async fn completed_now(node: &TestServer, key: &str) -> Option<usize> {
    let mut done = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut path = "/tasks?status=completed&limit=200".to_string();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", encode_query(c)));
        }
        let (status, body) = node.get(key, &path).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            return None;
        }
        assert_eq!(status, StatusCode::OK, "{body}");
        done += body["tasks"].as_array().map_or(0, Vec::len);
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return Some(done),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(
        taskq_test_env = "clients_python",
        taskq_test_env = "clients_node",
        taskq_test_env = "postgres"
    )),
    ignore = "needs TASKQ_TEST_CLIENTS_PYTHON, TASKQ_TEST_CLIENTS_NODE and TASKQ_TEST_POSTGRES_URL"
)]
async fn workers_ride_out_the_owner_killed_in_a_three_node_cluster() {
    let runtimes = runtimes();
    let _turn = TURN.lock().await;
    let master_key = {
        use base64::Engine as _;
        let bytes: Vec<u8> = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
            .iter()
            .flat_map(|u| u.into_bytes())
            .collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    // Each node names its own address to clients: a worker sent to a node
    // that is not the owner goes to the owner after its first answers.
    let first = TestServer::builder(Backend::Postgres)
        .nodes(3)
        .env("TASKQ_MASTER_KEY", &master_key)
        .env("TASKQ_PUBLIC_URL", "advertise")
        .start()
        .await;
    let mut nodes = vec![first];
    for _ in 1..3 {
        let node = TestServer::builder(Backend::Postgres)
            .joining(&nodes[0])
            .env("TASKQ_MASTER_KEY", &master_key)
            .env("TASKQ_PUBLIC_URL", "advertise")
            .start()
            .await;
        nodes.push(node);
    }
    settled(&nodes[0]).await;
    let org = nodes[0].create_org("dev").await;
    let key = org.owner_key.clone();
    let created = create_many(
        &nodes[0],
        &key,
        300,
        json!({ "metadata": { "sleep_ms": 200 } }),
    )
    .await;
    let owner = eventually(Duration::from_secs(10), "a node owns the org", || async {
        let (status, _) = nodes[0].get(&key, "/tasks?limit=1").await;
        assert_eq!(status, StatusCode::OK);
        nodes.iter().position(|n| owns(n, &org))
    })
    .await;
    let survivor = (owner + 1) % 3;
    let mut workers = Vec::new();
    for lang in BOTH {
        let mut spec = WorkerSpec::new(&nodes[survivor].base_url, &key);
        // A claim whose answer died with the owner holds its task until
        // the lease runs out: keep that short.
        spec.lease_seconds = 10;
        workers.push(WorkerProcess::start(&runtimes, lang, &spec).await);
    }
    let completed = |n: usize| {
        let workers = &workers;
        eventually(
            Duration::from_secs(60),
            "some tasks are completed",
            move || async move {
                let done: usize = workers.iter().map(|w| w.ids("completed").len()).sum();
                (done >= n).then_some(())
            },
        )
    };
    completed(30).await;
    // By now every worker follows the owner its first answers named: the
    // node they were sent to forwards nothing more.
    let forwarded = forwarded_by(&nodes[survivor]).await;
    completed(60).await;
    assert_eq!(
        forwarded_by(&nodes[survivor]).await,
        forwarded,
        "the workers' calls still went through the node they were sent to"
    );
    nodes[owner].kill9().await;
    let node = &nodes[survivor];
    eventually(
        Duration::from_secs(120),
        "every task is completed",
        || async { (completed_now(node, &key).await == Some(created.len())).then_some(()) },
    )
    .await;
    for worker in &mut workers {
        worker.stop_cleanly().await;
    }
    completed_once(&workers, &created);
    assert!(
        answered_503(node).await > 0,
        "the survivor never answered 503 while the org moved"
    );
}

/// Waits until the three nodes have been live for the heartbeats after
/// which orgs move to them, so that an org made now stays where it is placed.
async fn settled(node: &TestServer) {
    eventually(Duration::from_secs(15), "every node settled", || async {
        let (status, view) = node.admin(Method::GET, "/admin/cluster", None).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        let three = view["nodes"].as_array().is_some_and(|n| n.len() == 3);
        (three && cluster_settled(&view)).then_some(())
    })
    .await;
}

/// The node's `/metrics`.
async fn metrics(node: &TestServer) -> String {
    let auth = format!("Bearer {}", node.admin_token);
    let (status, text) = node
        .raw(Method::GET, "/metrics", &[("authorization", &auth)], None)
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    text
}

/// Requests the node forwarded to their org's owner, from its `/metrics`.
async fn forwarded_by(node: &TestServer) -> u64 {
    metrics(node)
        .await
        .lines()
        .find_map(|l| l.strip_prefix("taskq_cluster_forwarded_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("taskq_cluster_forwarded_total in /metrics")
}

/// Requests the node answered 503, from its `/metrics`.
async fn answered_503(node: &TestServer) -> u64 {
    metrics(node)
        .await
        .lines()
        .filter(|l| l.starts_with("taskq_http_requests_total{") && l.contains("status=\"503\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
