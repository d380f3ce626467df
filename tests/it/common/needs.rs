// What some tests need from outside the repository, each named by an
// environment variable, and the value the `taskq_test_env` cfg takes in a
// build made with it set. Read by the build scripts (`include!`), which
// emit the cfgs; a test marks what it needs with `cfg_attr(not(...),
// ignore = "...")`, so that a build without the variable shows the test
// as ignored, with its reason, instead of passing having run nothing.
// With `TASKQ_TEST_REQUIRE_ALL=1` every need counts as present: a test
// whose variable is then unset fails, naming it (`environment::need`).
// Nothing but the standard library: the build scripts include it too.

/// (cfg value, environment variable).
const NEEDS: [(&str, &str); 11] = [
    ("postgres", "TASKQ_TEST_POSTGRES_URL"),
    ("mcp_python", "TASKQ_TEST_MCP_PYTHON"),
    ("webhooks_python", "TASKQ_TEST_WEBHOOKS_PYTHON"),
    ("chromedriver", "TASKQ_TEST_CHROMEDRIVER"),
    ("axe", "TASKQ_TEST_AXE_JS"),
    ("nginx", "TASKQ_TEST_NGINX"),
    ("schemathesis", "TASKQ_TEST_SCHEMATHESIS"),
    ("model", "TASKQ_TEST_EMBEDDINGS_MODEL_DIR"),
    ("clients_python", "TASKQ_TEST_CLIENTS_PYTHON"),
    ("clients_node", "TASKQ_TEST_CLIENTS_NODE"),
    ("jq", "TASKQ_TEST_JQ"),
];

/// Emits, for a build script, the `taskq_test_env` cfg of each need
/// `wanted` keeps that this build has.
#[allow(dead_code)]
fn emit_needs(wanted: impl Fn(&str) -> bool) {
    let values: Vec<String> = NEEDS.iter().map(|(v, _)| format!("\"{v}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(taskq_test_env, values({}))",
        values.join(", ")
    );
    println!("cargo::rerun-if-env-changed=TASKQ_TEST_REQUIRE_ALL");
    let all = std::env::var("TASKQ_TEST_REQUIRE_ALL").is_ok_and(|v| v == "1");
    for (value, variable) in NEEDS.iter().filter(|(v, _)| wanted(v)) {
        println!("cargo::rerun-if-env-changed={variable}");
        if all || std::env::var(variable).is_ok_and(|v| !v.is_empty()) {
            println!("cargo::rustc-cfg=taskq_test_env=\"{value}\"");
        }
    }
}
