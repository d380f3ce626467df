//! Headless Chromium over WebDriver: plain JSON over HTTP to a
//! `chromedriver` this module starts, one browser session per `Browser`,
//! for the operator page's and the board's browser tests. Also axe-core,
//! injected into a page and run there.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde_json::{json, Value};

use super::{eventually, str_field};

pub const CHROMEDRIVER_ENV: &str = "TASKQ_TEST_CHROMEDRIVER";
pub const CHROMIUM_ENV: &str = "TASKQ_TEST_CHROMIUM";
pub const AXE_ENV: &str = "TASKQ_TEST_AXE_JS";
const ARTIFACTS_ENV: &str = "TASKQ_TEST_ARTIFACTS";
/// Where the screenshots of the views also go (those `docs/guide/board.md`
/// shows, under `docs/board/`), when set.
const SCREENSHOTS_ENV: &str = "TASKQ_BOARD_SCREENSHOTS";

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// The chromedriver to use (`taskq_test_env = "chromedriver"`).
pub fn chromedriver() -> String {
    super::need(CHROMEDRIVER_ENV)
}

/// axe-core's source (`taskq_test_env = "axe"`).
pub fn axe_source() -> String {
    let path = super::need(AXE_ENV);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

pub struct Browser {
    http: reqwest::Client,
    session: String,
    _driver: tokio::process::Child,
}

impl Browser {
    pub async fn start(chromedriver: &str) -> Browser {
        let chromium = std::env::var(CHROMIUM_ENV)
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/usr/bin/chromium".to_owned());
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let driver = tokio::process::Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {chromedriver}: {e}"));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        eventually(Duration::from_secs(20), "chromedriver ready", || {
            let http = http.clone();
            let url = format!("{base}/status");
            async move {
                let v: Value = http.get(url).send().await.ok()?.json().await.ok()?;
                (v["value"]["ready"] == true).then_some(())
            }
        })
        .await;
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            },
        }}});
        let resp: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("POST /session")
            .json()
            .await
            .expect("session JSON");
        let session = resp["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {resp}"))
            .to_owned();
        Browser {
            http,
            session: format!("{base}/session/{session}"),
            _driver: driver,
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.session));
        if let Some(b) = body {
            req = req.json(&b);
        } else if method == Method::POST {
            req = req.json(&json!({}));
        }
        let resp: Value = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
            .json()
            .await
            .expect("WebDriver JSON");
        if resp["value"]["error"].is_string() {
            panic!("WebDriver {method} {path}: {resp}");
        }
        resp["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.call(Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    pub async fn url(&self) -> String {
        self.call(Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn find(&self, css: &str) -> String {
        let v = self
            .call(
                Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        str_field(&v, ELEMENT)
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        self.call(Method::POST, &format!("/element/{el}/clear"), None)
            .await;
        self.call(
            Method::POST,
            &format!("/element/{el}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    pub async fn click(&self, css: &str) {
        let el = self.find(css).await;
        self.call(Method::POST, &format!("/element/{el}/click"), None)
            .await;
    }

    pub async fn script(&self, script: &str) -> Value {
        self.call(
            Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    async fn script_async(&self, script: &str) -> Value {
        self.call(
            Method::POST,
            "/execute/async",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Polls `condition` (a script expression) until it is true.
    pub async fn wait_for(&self, what: &str, condition: &str) {
        let script = format!("return Boolean({condition});");
        eventually(Duration::from_secs(20), what, || {
            let script = script.clone();
            async move { (self.script(&script).await == true).then_some(()) }
        })
        .await;
    }

    /// The serious and critical violations axe-core finds on the page.
    pub async fn axe_violations(&self, axe: &str) -> Vec<Value> {
        self.call(Method::POST, "/timeouts", Some(json!({ "script": 60_000 })))
            .await;
        self.script(&format!("{axe}\n;return typeof axe;")).await;
        let found = self
            .script_async(
                r#"const done = arguments[arguments.length - 1];
axe.run(document, { resultTypes: ["violations"] }).then(r => done(
  r.violations
    .filter(v => v.impact === "serious" || v.impact === "critical")
    .map(v => ({ id: v.id, impact: v.impact, help: v.help,
                 nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ")) }))
), e => done([{ id: "axe-error", impact: "critical", help: String(e) }]));"#,
            )
            .await;
        found.as_array().cloned().unwrap_or_default()
    }

    /// Keeps a screenshot of the page as `{name}.png`.
    pub async fn screenshot(&self, name: &str) {
        let v = self.call(Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .expect("PNG bytes");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let mut dirs = vec![artifacts_dir()];
        if let Ok(dir) = std::env::var(SCREENSHOTS_ENV) {
            if !dir.is_empty() {
                dirs.push(PathBuf::from(dir));
            }
        }
        for dir in dirs {
            std::fs::create_dir_all(&dir).expect("create the screenshot directory");
            let path = dir.join(format!("{name}.png"));
            std::fs::write(&path, &png).expect("write the screenshot");
            eprintln!("screenshot: {}", path.display());
        }
    }

    pub async fn quit(&self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

fn artifacts_dir() -> PathBuf {
    match std::env::var(ARTIFACTS_ENV) {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("the target directory")
            .join("test-artifacts"),
    }
}
